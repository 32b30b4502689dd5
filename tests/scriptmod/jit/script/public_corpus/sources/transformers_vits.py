# Copied from huggingface/transformers v4.48.3 (the published wheel, transformers-4.48.3),
# src/transformers/models/vits/modeling_vits.py: fused_add_tanh_sigmoid_multiply (@torch.jit.script).
# Apache License 2.0, Copyright The HuggingFace Team (and the file's named authors).


@torch.jit.script
def fused_add_tanh_sigmoid_multiply(input_a, input_b, num_channels):
    in_act = input_a + input_b
    t_act = torch.tanh(in_act[:, :num_channels, :])
    s_act = torch.sigmoid(in_act[:, num_channels:, :])
    acts = t_act * s_act
    return acts
