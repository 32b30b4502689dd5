# Copied from huggingface/transformers v4.48.3 (the published wheel, transformers-4.48.3),
# src/transformers/models/gpt_bigcode/modeling_gpt_bigcode.py: masked_softmax (@torch.jit.script)
# with the comment above the three fused helpers; upcast_masked_softmax and upcast_softmax
# (which take a torch.dtype argument) left out.
# Apache License 2.0, Copyright The HuggingFace Team (and the file's named authors).


# Fused kernels
# Use separate functions for each case because conditionals prevent kernel fusion.
# TODO: Could have better fused kernels depending on scaling, dropout and head mask.
#  Is it doable without writing 32 functions?
@torch.jit.script
def masked_softmax(x: torch.Tensor, mask: torch.Tensor, mask_value: torch.Tensor):
    x = torch.where(mask, x, mask_value)
    x = torch.nn.functional.softmax(x, dim=-1)
    return x
