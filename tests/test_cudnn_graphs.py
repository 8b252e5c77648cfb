"""The graphs twinfer hands cuDNN's graph API (backends/cuda/cudnn_fe_*.cc),
run through the frontend's own checks with no GPU: this loads cuDNN and the
shared CUDA runtime the way the frontend will on a GPU, checks our dims,
strides and padding conventions against cuDNN's shape inference, and
catches a graph its rules refuse. Whether an engine then runs a graph is
only known on the device (the cuda tests of test_device_kernels and
test_fuse_attention)."""

from __future__ import annotations

import pytest

import twinfer

pytestmark = pytest.mark.cuda_build


@pytest.fixture(scope="module", autouse=True)
def _frontend():
    info = twinfer.build_info()
    if not info["cudnn_frontend"] or not info["cudnn"]:
        pytest.skip(f"cuDNN frontend {info['cudnn_frontend']}, cuDNN {info['cudnn']}: pip install '.[cuda]' "
                    "nvidia-cudnn-frontend==1.28.0 and rebuild")


def test_attention_graphs_for_an_h100():
    check = twinfer._core._test_cudnn_sdpa_validate
    vit, bert = [64, 12, 197, 197, 64, 64], [64, 12, 128, 128, 64, 64]
    assert check(vit, "float16", False, [], 90) == ""
    assert check(bert, "bfloat16", False, [64, 1, 1, 128], 90) == ""  # BERT's padding mask, broadcast
    assert check([2, 3, 37, 53, 64, 64], "float16", True, [], 90) == ""  # causal, fewer queries than keys
    assert check([2, 3, 37, 53, 32, 48], "float16", False, [2, 3, 37, 53], 90) == ""  # MiniLM's head, Dv != D
    assert "multiple of 8" in check([2, 3, 37, 53, 20, 20], "float16", False, [], 90)
    # A mask broadcast over the keys: frontend 1.28 does not check the bias's
    # key stride, and cuDNN would read it as contiguous; our own kernel runs.
    assert "broadcast over the keys" in check([2, 3, 37, 53, 64, 64], "float16", False, [2, 3, 37, 1], 90)


def test_grouped_query_attention_graphs_for_an_h100():
    # Grouped query heads (dims' 7th entry: the key / value heads): query head
    # h reads key head h / (H / Hkv), K and V never repeated; what
    # fuse_attention hands cuDNN for a Llama-style model in 16 bits.
    check = twinfer._core._test_cudnn_sdpa_validate
    assert check([2, 8, 37, 53, 64, 64, 2], "float16", False, [], 90) == ""  # GQA
    assert check([2, 8, 1, 53, 128, 128, 1], "bfloat16", False, [2, 1, 1, 53], 90) == ""  # MQA decode, padding
    assert check([2, 6, 37, 53, 64, 64, 3], "float16", True, [], 90) == ""  # causal prefill
    assert check([2, 6, 37, 53, 64, 64, 6], "float16", False, [2, 6, 37, 53], 90) == ""  # as many: plain MHA
    assert check([2, 6, 37, 53, 64, 64, 4], "float16", False, [], 90) != ""  # 4 key heads cannot serve 6


def test_strided_attention_graphs_for_an_h100():
    # Operands read in place (ops/transformer/attention_views.h): strides of
    # q, k, v and o over (b, h, s), d contiguous.
    check = twinfer._core._test_cudnn_sdpa_validate
    B, S, H, D = 64, 197, 12, 64
    E = H * D
    vit = [3 * E, D, 3 * B * E] * 3 + [E, D, B * E]  # ViT: slices of the packed [S, B, 3E] projection, out [S*B, E]
    assert check([B, H, S, S, D, D], "float16", False, [], 90, vit) == ""
    S = 128
    bert = [S * E, D, E] * 4  # BERT: heads of [B, S, E] tensors, out [B, S, E]
    assert check([B, H, S, S, D, D], "bfloat16", False, [B, 1, 1, S], 90, bert) == ""
    with pytest.raises(twinfer.InvalidArgumentError, match="strides"):
        check([B, H, S, S, D, D], "float16", False, [], 90, bert[:9])


# (x, w, pads, strides, dilations, groups): ResNet's stem and downsampling,
# MobileNet's depthwise, a grouped dilated one, a 1-d one as conv.cc hands it
# (a height of 1), a 3-d one; odd sizes.
CONVS = [
    ([3, 3, 37, 41], [64, 3, 7, 7], [3, 3], [2, 2], [1, 1], 1),
    ([2, 64, 19, 21], [128, 64, 1, 1], [0, 0], [2, 2], [1, 1], 1),
    ([2, 32, 17, 19], [32, 1, 3, 3], [1, 1], [1, 1], [1, 1], 32),
    ([2, 8, 17, 19], [12, 2, 3, 3], [0, 0], [1, 2], [2, 2], 4),
    ([2, 3, 1, 29], [8, 3, 1, 5], [0, 2], [1, 3], [1, 1], 1),
    ([1, 4, 5, 11, 13], [6, 4, 3, 3, 3], [1, 1, 1], [1, 2, 1], [1, 1, 2], 1),
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("x, w, pads, strides, dilations, groups", CONVS)
def test_convolution_graphs_match_pytorchs_shapes(x, w, pads, strides, dilations, groups, dtype):
    torch = pytest.importorskip("torch")
    conv = {4: torch.nn.functional.conv2d, 5: torch.nn.functional.conv3d}[len(x)]
    y = list(conv(torch.zeros(x), torch.zeros(w), stride=strides, padding=pads, dilation=dilations, groups=groups).shape)
    check = twinfer._core._test_cudnn_conv_validate
    assert check(x, w, y, pads, strides, dilations, dtype) == ""
    wrong = y[:2] + [d + 1 for d in y[2:]]
    assert "cuDNN infers the output as" in check(x, w, wrong, pads, strides, dilations, dtype)


@pytest.mark.parametrize("x, w, pads, strides, dilations", [
    ([2, 64, 19, 21], [128, 64, 3, 3], [1, 1], [2, 2], [1, 1]),   # ResNet's 3x3 downsampling, int8
    ([2, 8, 1, 29], [12, 8, 1, 5], [0, 2], [1, 3], [1, 1]),       # a 1-d one as QConv hands it
    ([1, 16, 9, 7], [4, 16, 3, 3], [2, 2], [1, 1], [2, 2]),       # dilated
])
def test_int8_channels_last_convolution_graphs(x, w, pads, strides, dilations):
    # QConv's cuDNN form (gemm_qlinear.cc): int8 x and w channels-last, the
    # int32 accumulator out through a pointwise identity.
    torch = pytest.importorskip("torch")
    y = list(torch.nn.functional.conv2d(torch.zeros(x), torch.zeros(w), stride=strides, padding=pads,
                                        dilation=dilations).shape)
    check = twinfer._core._test_cudnn_conv_validate
    assert check(x, w, y, pads, strides, dilations, "int8") == ""
    assert "cuDNN infers the output as" in check(x, w, y[:2] + [y[2] + 1, y[3]], pads, strides, dilations, "int8")


@pytest.mark.parametrize("x, w, pads, strides, options", [
    ([2, 64, 19, 21], [128, 64, 3, 3], [1, 1], [2, 2], ":requantize:bias:relu"),  # ResNet's 3x3 downsampling
    ([2, 16, 9, 7], [32, 16, 3, 3], [1, 1], [1, 1], ":requantize"),                # no bias, no activation
    ([2, 8, 1, 29], [12, 8, 1, 5], [0, 2], [1, 3], ":requantize:bias"),            # a 1-d one as QConv hands it
])
def test_int8_requantizing_convolution_graphs(x, w, pads, strides, options):
    # QConv's fused form (gemm_qlinear.cc): the int32 sums times a float32
    # scale per channel, plus a float32 bias, ReLU, written as int8 by cuDNN.
    torch = pytest.importorskip("torch")
    y = list(torch.nn.functional.conv2d(torch.zeros(x), torch.zeros(w), stride=strides, padding=pads).shape)
    check = twinfer._core._test_cudnn_conv_validate
    assert check(x, w, y, pads, strides, [1, 1], "int8" + options) == ""
    assert "cuDNN infers the output as" in check(x, w, y[:2] + [y[2] + 1, y[3]], pads, strides, [1, 1], "int8" + options)
    # Only ReLU (or nothing) goes in; other activations take the int32 form.
    assert "ReLU" in check(x, w, y, pads, strides, [1, 1], "int8" + options + ":sigmoid")
    # A float convolution has no requantization.
    assert check(x, w, y, pads, strides, [1, 1], "float16:nhwc:requantize") != ""
