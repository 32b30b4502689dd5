"""Entries of the public corpus from torchvision 0.29.1 (``sources/torchvision_*.py``): box
ops, box losses, focal loss, stochastic depth, ``ops.misc`` and FPN modules, detection helpers
and the scriptable tensor transforms (``transforms/_functional_tensor.py``)."""
from __future__ import annotations

import numpy as np

from . import Entry


def _origin(path: str) -> str:
    return f"pytorch/vision torchvision/{path}@v0.29.1"


TV = _origin("ops/boxes.py")
BOXCONV = _origin("ops/_box_convert.py")
UTILS = _origin("ops/_utils.py")
GIOU = _origin("ops/giou_loss.py")
DIOU = _origin("ops/diou_loss.py")
CIOU = _origin("ops/ciou_loss.py")
FOCAL = _origin("ops/focal_loss.py")
SD = _origin("ops/stochastic_depth.py")
MISC = _origin("ops/misc.py")
FPN = _origin("ops/feature_pyramid_network.py")
RPN = _origin("models/detection/rpn.py")
DUTILS = _origin("models/detection/_utils.py")
DTRANS = _origin("models/detection/transform.py")
FT = _origin("transforms/_functional_tensor.py")


def _boxes(rng: np.random.Generator, n: int, dtype: type = np.float32) -> np.ndarray:
    """``n`` valid xyxy boxes (x1 < x2, y1 < y2) in a 100 x 100 image."""
    xy = rng.uniform(0, 80, (n, 2))
    wh = rng.uniform(1, 20, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1).astype(dtype)


def _pairs(rng: np.random.Generator, n: int, dtype: type = np.float32) -> tuple:
    """Two sets of ``n`` xyxy boxes, the second a jittered copy of the first (so most pairs
    overlap and some do not)."""
    a = _boxes(rng, n, np.float64)
    b = a + rng.uniform(-6, 6, (n, 4))
    b[:, 2:] = np.maximum(b[:, 2:], b[:, :2] + 1)
    if n > 1:
        b[-1] += 40                           # one pair apart
    return a.astype(dtype), b.astype(dtype)


def _rotated(rng: np.random.Generator, n: int, dtype: type = np.float32) -> np.ndarray:
    """``n`` rotated boxes (x, y, w, h, r degrees)."""
    return np.concatenate([rng.uniform(10, 80, (n, 2)), rng.uniform(1, 20, (n, 2)),
                           rng.uniform(-90, 90, (n, 1))], axis=1).astype(dtype)


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _img(rng: np.random.Generator, *shape: int, dtype: type = np.float32) -> np.ndarray:
    """An image in [0, 1] (floats) or [0, 255] (uint8)."""
    if dtype == np.uint8:
        return rng.integers(0, 256, shape).astype(np.uint8)
    return rng.uniform(0, 1, shape).astype(dtype)


def _losses(rng: np.random.Generator) -> list[tuple]:
    a, b = _pairs(rng, 5)
    a64, b64 = _pairs(rng, 3, np.float64)
    ai, bi = _pairs(rng, 4)
    return [(a, b), (a, b, "mean"), (a, b, "sum", 1e-6), (a64, b64, "mean"),
            (np.round(ai).astype(np.int64), np.round(bi).astype(np.int64) + np.array([0, 0, 1, 1]),
             "sum"),
            (np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32), "mean"),
            (a, b, "max")]


ENTRIES: list[Entry] = [
    # ---- ops/boxes.py (+ ops/_box_convert.py, ops/_utils.py) --------------------------------
    Entry("tv_box_area", TV, "torchvision_boxes.py", "box_area",
          lambda rng: [(_boxes(rng, 5),), (_boxes(rng, 3, np.float64), "xywh"),
                       (_boxes(rng, 4).astype(np.int64),), (_boxes(rng, 2), "bad")]),
    Entry("tv_box_inter_union", TV, "torchvision_boxes.py", "_box_inter_union",
          lambda rng: [(_boxes(rng, 5), _boxes(rng, 3)),
                       (_boxes(rng, 2), _boxes(rng, 4), "cxcywh")]),
    Entry("tv_upcast", UTILS, "torchvision_boxes.py", "_upcast",
          lambda rng: [(_boxes(rng, 2),), (_boxes(rng, 2, np.float64),),
                       (_boxes(rng, 2, np.float16),), (_boxes(rng, 2).astype(np.int16),),
                       (_boxes(rng, 2).astype(np.int64),), (_boxes(rng, 2).astype(np.uint8),)]),
    Entry("tv_box_convert", TV, "torchvision_boxes.py", "box_convert",
          lambda rng: [(_boxes(rng, 3), "xyxy", "cxcywh"), (_boxes(rng, 3), "cxcywh", "xywh"),
                       (_boxes(rng, 3, np.float64), "xywh", "cxcywh"),
                       (_boxes(rng, 3), "xyxy", "xyxy"),
                       (_rotated(rng, 3), "cxcywhr", "xyxyxyxy"),
                       (np.round(_rotated(rng, 3)).astype(np.int64), "xywhr", "xyxyxyxy"),
                       (_boxes(rng, 3), "xyxy", "abc")]),
    Entry("tv_box_xyxyxyxy_to_xywhr", BOXCONV, "torchvision_boxes.py", "_box_xyxyxyxy_to_xywhr",
          lambda rng: [(rng.uniform(0, 50, (3, 8)).astype(np.float32),),
                       (rng.uniform(0, 50, (2, 8)),),
                       (rng.integers(0, 50, (3, 8)).astype(np.int64),)]),
    Entry("tv_box_cxcywhr_to_xywhr", BOXCONV, "torchvision_boxes.py", "_box_cxcywhr_to_xywhr",
          lambda rng: [(_rotated(rng, 4),), (_rotated(rng, 2, np.float64),),
                       (np.round(_rotated(rng, 3)).astype(np.int64),)]),
    Entry("tv_remove_small_boxes", TV, "torchvision_boxes.py", "remove_small_boxes",
          lambda rng: [(_boxes(rng, 8), 8.0), (_boxes(rng, 6, np.float64), 12.5),
                       (_boxes(rng, 4), 100.0)]),
    Entry("tv_generalized_box_iou", TV, "torchvision_boxes.py", "generalized_box_iou",
          lambda rng: [(_boxes(rng, 5), _boxes(rng, 3)), (_boxes(rng, 2, np.float64), _boxes(rng, 4)
                                                          .astype(np.float64)),
                       (np.round(_boxes(rng, 3)).astype(np.int64),
                        np.round(_boxes(rng, 2)).astype(np.int64)),
                       (_boxes(rng, 6).reshape(2, 3, 4), _boxes(rng, 4).reshape(2, 2, 4))]),
    # ---- ops/giou_loss.py, diou_loss.py, ciou_loss.py, focal_loss.py ---------------------------
    Entry("tv_generalized_box_iou_loss", GIOU, "torchvision_giou_loss.py",
          "generalized_box_iou_loss", _losses),
    Entry("tv_distance_box_iou_loss", DIOU, "torchvision_diou_loss.py", "distance_box_iou_loss",
          _losses),
    Entry("tv_complete_box_iou_loss", CIOU, "torchvision_ciou_loss.py", "complete_box_iou_loss",
          _losses),
    Entry("tv_loss_inter_union", UTILS, "torchvision_giou_loss.py", "_loss_inter_union",
          lambda rng: [_pairs(rng, 5), _pairs(rng, 3, np.float64), _pairs(rng, 1)]),
    Entry("tv_sigmoid_focal_loss", FOCAL, "torchvision_focal_loss.py", "sigmoid_focal_loss",
          lambda rng: [(_f32(rng, 4, 3), (rng.uniform(0, 1, (4, 3)) > 0.5).astype(np.float32)),
                       (_f32(rng, 5), (rng.uniform(0, 1, 5) > 0.5).astype(np.float32), -1.0, 1.5,
                        "mean"),
                       (_f32(rng, 2, 3).astype(np.float64),
                        (rng.uniform(0, 1, (2, 3)) > 0.5).astype(np.float64), 0.5, 0.0, "sum"),
                       (_f32(rng, 3), np.ones(3, np.float32), 1.5),
                       (_f32(rng, 3), np.ones(3, np.float32), 0.25, 2.0, "avg")]),
    # ---- ops/stochastic_depth.py ---------------------------------------------------------------
    Entry("tv_stochastic_depth", SD, "torchvision_stochastic_depth.py", "stochastic_depth",
          lambda rng: [(_f32(rng, 3, 4), 0.5, "row", False), (_f32(rng, 3, 4), 0.0, "batch"),
                       (_f32(rng, 2, 3, 4), 1.0, "row", True),
                       (_f32(rng, 2, 3).astype(np.float64), 1.0, "batch", True),
                       (_f32(rng, 2), 1.5, "row"), (_f32(rng, 2), 0.5, "col")]),
    Entry("tv_StochasticDepth", SD, "torchvision_stochastic_depth.py", "StochasticDepth",
          lambda rng: [(_f32(rng, 3, 4),), (_f32(rng, 2, 5, 2),)],
          build=lambda ns: ns.StochasticDepth(0.2, "row")),
    # ---- ops/misc.py ---------------------------------------------------------------------------
    Entry("tv_FrozenBatchNorm2d", MISC, "torchvision_misc.py", "FrozenBatchNorm2d",
          lambda rng: [(_f32(rng, 2, 4, 3, 3),), (_f32(rng, 1, 4, 2, 5),)],
          build=lambda ns: ns.FrozenBatchNorm2d(4, eps=1e-3)),
    Entry("tv_SqueezeExcitation", MISC, "torchvision_misc.py", "SqueezeExcitation",
          lambda rng: [(_f32(rng, 2, 8, 5, 5),), (_f32(rng, 1, 8, 3, 4),)],
          build=lambda ns: ns.SqueezeExcitation(8, 4)),
    Entry("tv_MLP", MISC, "torchvision_misc.py", "MLP",
          lambda rng: [(_f32(rng, 3, 6),), (_f32(rng, 2, 4, 6),)],
          build=lambda ns: ns.MLP(6, [8, 5, 3], norm_layer=ns.nn.LayerNorm, dropout=0.1)),
    Entry("tv_Permute", MISC, "torchvision_misc.py", "Permute",
          lambda rng: [(_f32(rng, 2, 3, 4, 5),), (_f32(rng, 1, 2, 1, 3),)],
          build=lambda ns: ns.Permute([0, 2, 3, 1])),
    Entry("tv_Conv2dNormActivation", MISC, "torchvision_misc.py", "Conv2dNormActivation",
          lambda rng: [(_f32(rng, 2, 3, 6, 6),), (_f32(rng, 1, 3, 5, 4),)],
          build=lambda ns: ns.Conv2dNormActivation(3, 5, kernel_size=3, stride=2)),
    # ---- ops/feature_pyramid_network.py --------------------------------------------------------
    Entry("tv_LastLevelMaxPool", FPN, "torchvision_feature_pyramid_network.py", "LastLevelMaxPool",
          lambda rng: [([_f32(rng, 1, 2, 8, 8), _f32(rng, 1, 2, 5, 5)], [_f32(rng, 1, 3, 4, 4)],
                        ["a", "b"])],
          build=lambda ns: ns.LastLevelMaxPool()),
    Entry("tv_LastLevelP6P7", FPN, "torchvision_feature_pyramid_network.py", "LastLevelP6P7",
          lambda rng: [([_f32(rng, 1, 4, 8, 8)], [_f32(rng, 1, 4, 8, 8)], ["p5"])],
          build=lambda ns: ns.LastLevelP6P7(4, 4)),
    Entry("tv_FeaturePyramidNetwork", FPN, "torchvision_feature_pyramid_network.py",
          "FeaturePyramidNetwork",
          lambda rng: [({"feat0": _f32(rng, 1, 4, 8, 8), "feat1": _f32(rng, 1, 6, 4, 4),
                         "feat2": _f32(rng, 1, 8, 2, 2)},)],
          build=lambda ns: ns.FeaturePyramidNetwork([4, 6, 8], 5,
                                                    extra_blocks=ns.LastLevelMaxPool())),
    # ---- models/detection ----------------------------------------------------------------------
    Entry("tv_RPNHead", RPN, "torchvision_rpn.py", "RPNHead",
          lambda rng: [([_f32(rng, 1, 4, 6, 6), _f32(rng, 1, 4, 3, 3)],)],
          build=lambda ns: ns.RPNHead(4, 3, conv_depth=2)),
    Entry("tv_permute_and_flatten", RPN, "torchvision_rpn.py", "permute_and_flatten",
          lambda rng: [(_f32(rng, 2, 6, 3, 4), 2, 3, 2, 3, 4),
                       (_f32(rng, 1, 12, 2, 2), 1, 3, 4, 2, 2)]),
    Entry("tv_concat_box_prediction_layers", RPN, "torchvision_rpn.py",
          "concat_box_prediction_layers",
          lambda rng: [([_f32(rng, 2, 3, 4, 4), _f32(rng, 2, 3, 2, 2)],
                        [_f32(rng, 2, 12, 4, 4), _f32(rng, 2, 12, 2, 2)]),
                       ([_f32(rng, 1, 6, 2, 3)], [_f32(rng, 1, 12, 2, 3)])]),
    Entry("tv_encode_boxes", DUTILS, "torchvision_detection_utils.py", "encode_boxes",
          lambda rng: [(*_pairs(rng, 4), np.array([10.0, 10.0, 5.0, 5.0], np.float32)),
                       (*_pairs(rng, 3, np.float64), np.array([1.0, 1.0, 1.0, 1.0]))]),
    Entry("tv_topk_min", DUTILS, "torchvision_detection_utils.py", "_topk_min",
          lambda rng: [(_f32(rng, 3, 7), 5, 1), (_f32(rng, 3, 7), 5, 0), (_f32(rng, 4), 10, -1)]),
    Entry("tv_resize_boxes", DTRANS, "torchvision_detection_transform.py", "resize_boxes",
          lambda rng: [(_boxes(rng, 4), [100, 120], [50, 80]),
                       (_boxes(rng, 2, np.float64), [64, 64], [128, 96])]),
    Entry("tv_resize_keypoints", DTRANS, "torchvision_detection_transform.py", "resize_keypoints",
          lambda rng: [(rng.uniform(0, 50, (2, 3, 3)).astype(np.float32), [100, 120], [50, 80])],
          xfail=('`torch._C._get_tracing_state()` '
                 '(sources/torchvision_detection_transform.py:14): FrontendError: scriptmod has '
                 "no attribute '_C'")),
    # ---- transforms/_functional_tensor.py ------------------------------------------------------
    Entry("tv_get_dimensions", FT, "torchvision_functional_tensor.py", "get_dimensions",
          lambda rng: [(_img(rng, 3, 4, 5),), (_img(rng, 4, 5),), (_img(rng, 2, 1, 3, 2),),
                       (_img(rng, 5),)]),
    Entry("tv_get_image_num_channels", FT, "torchvision_functional_tensor.py",
          "get_image_num_channels",
          lambda rng: [(_img(rng, 3, 4, 5),), (_img(rng, 4, 5),), (_img(rng, 5),)]),
    Entry("tv_convert_image_dtype", FT, "torchvision_functional_tensor.py", "convert_image_dtype",
          lambda rng: [(_img(rng, 3, 2, 2, dtype=np.uint8),), (_img(rng, 3, 2, 2),),
                       (_img(rng, 3, 2, 2, dtype=np.float64),),
                       (rng.integers(0, 1000, (1, 2, 2)).astype(np.int64),),
                       (rng.integers(0, 100, (1, 2, 2)).astype(np.int16),)]),
    Entry("tv_rgb_to_grayscale", FT, "torchvision_functional_tensor.py", "rgb_to_grayscale",
          lambda rng: [(_img(rng, 3, 4, 5),), (_img(rng, 2, 3, 4, 4), 3),
                       (_img(rng, 3, 3, 3, dtype=np.uint8),), (_img(rng, 1, 4, 4), 3),
                       (_img(rng, 4, 4),), (_img(rng, 2, 4, 4),), (_img(rng, 3, 4, 4), 2)]),
    Entry("tv_adjust_brightness", FT, "torchvision_functional_tensor.py", "adjust_brightness",
          lambda rng: [(_img(rng, 3, 4, 5), 1.4), (_img(rng, 1, 3, 3, dtype=np.uint8), 0.6),
                       (_img(rng, 3, 2, 2), -1.0)]),
    Entry("tv_adjust_contrast", FT, "torchvision_functional_tensor.py", "adjust_contrast",
          lambda rng: [(_img(rng, 3, 4, 5), 1.4), (_img(rng, 1, 3, 3, dtype=np.uint8), 0.6),
                       (_img(rng, 2, 3, 3, 3, dtype=np.float64), 0.3)]),
    Entry("tv_adjust_hue", FT, "torchvision_functional_tensor.py", "adjust_hue",
          lambda rng: [(_img(rng, 3, 4, 5), 0.2), (_img(rng, 3, 3, 3, dtype=np.uint8), -0.3),
                       (_img(rng, 1, 3, 3), 0.1), (_img(rng, 3, 2, 2), 0.7)],
          atol=1e-4),
    Entry("tv_adjust_saturation", FT, "torchvision_functional_tensor.py", "adjust_saturation",
          lambda rng: [(_img(rng, 3, 4, 5), 1.7), (_img(rng, 3, 3, 3, dtype=np.uint8), 0.5),
                       (_img(rng, 1, 3, 3), 0.1)]),
    Entry("tv_adjust_gamma", FT, "torchvision_functional_tensor.py", "adjust_gamma",
          lambda rng: [(_img(rng, 3, 4, 5), 0.8), (_img(rng, 3, 3, 3, dtype=np.uint8), 2.2, 1.1),
                       (_img(rng, 3, 2, 2), -1.0)]),
    Entry("tv_pad_symmetric", FT, "torchvision_functional_tensor.py", "_pad_symmetric",
          lambda rng: [(_img(rng, 2, 4, 5), [1, 2, 2, 1]), (_img(rng, 1, 2, 3, 3), [0, 1, 3, 0]),
                       (_img(rng, 1, 5, 5), [-1, 2, 1, -2]), (_img(rng, 5, 5), [1, 1, 1, 1])]),
    Entry("tv_invert", FT, "torchvision_functional_tensor.py", "invert",
          lambda rng: [(_img(rng, 3, 4, 5),), (_img(rng, 1, 3, 3, dtype=np.uint8),),
                       (_img(rng, 4, 4),)]),
    Entry("tv_posterize", FT, "torchvision_functional_tensor.py", "posterize",
          lambda rng: [(_img(rng, 3, 4, 5, dtype=np.uint8), 3),
                       (_img(rng, 1, 3, 3, dtype=np.uint8), 8),
                       (_img(rng, 3, 2, 2), 2)]),
    Entry("tv_solarize", FT, "torchvision_functional_tensor.py", "solarize",
          lambda rng: [(_img(rng, 3, 4, 5), 0.5), (_img(rng, 1, 3, 3, dtype=np.uint8), 128.0),
                       (_img(rng, 3, 2, 2), 2.0)]),
    Entry("tv_autocontrast", FT, "torchvision_functional_tensor.py", "autocontrast",
          lambda rng: [(_img(rng, 3, 4, 5),), (_img(rng, 1, 3, 3, dtype=np.uint8),),
                       (np.full((1, 2, 2), 0.5, np.float32),)]),
    Entry("tv_equalize", FT, "torchvision_functional_tensor.py", "equalize",
          lambda rng: [(_img(rng, 3, 6, 6, dtype=np.uint8),),
                       (_img(rng, 2, 1, 5, 5, dtype=np.uint8),),
                       (np.full((1, 3, 3), 7, np.uint8),), (_img(rng, 3, 2, 2),)]),
    Entry("tv_normalize", FT, "torchvision_functional_tensor.py", "normalize",
          lambda rng: [(_img(rng, 3, 4, 5), [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]),
                       (_img(rng, 2, 3, 2, 2, dtype=np.float64), [0.5], [0.5], True),
                       (_img(rng, 3, 2, 2), [0.5], [0.0]),
                       (_img(rng, 3, 2, 2, dtype=np.uint8), [0.5], [0.5])]),
    Entry("tv_erase", FT, "torchvision_functional_tensor.py", "erase",
          lambda rng: [(_img(rng, 3, 6, 6), 1, 2, 3, 2, np.zeros((3, 1, 1), np.float32)),
                       (_img(rng, 3, 6, 6), 0, 0, 2, 2, _img(rng, 3, 2, 2), True)]),
]
