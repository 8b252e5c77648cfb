"""How tests/data/gpt2_tiny_merged_decoder.onnx was made (not run by the tests).

A 2-layer GPT-2 (32 wide, vocabulary 97, random weights, seed 0) exported the
way Hugging Face Optimum 1.x exported decoders before 2025 and
transformers.js's ONNX models still ship them: decoder_model.onnx (no past in,
present out) and decoder_with_past_model.onnx, merged by Optimum's
merge_decoders into one model whose If on the `use_cache_branch` input picks
the network. The merge keeps the first model's input declarations, so
attention_mask's length is named `sequence_length` like input_ids', which holds
only on the first step.

    pip install --target /tmp/optsite --no-deps "transformers==4.57.1" "optimum==2.1.0" \
        "optimum-onnx==0.1.0" "huggingface_hub<1.0,>=0.34" "tokenizers>=0.22,<0.23"
    PYTHONPATH=/tmp/optsite python tests/data/make_merged_decoder.py   # torch 2.14.1
"""

from pathlib import Path
from tempfile import TemporaryDirectory

import torch
from optimum.exporters.onnx import export
from optimum.exporters.onnx.model_configs import GPT2OnnxConfig
from optimum.onnx.graph_transformations import merge_decoders
from transformers import GPT2Config, GPT2LMHeadModel

HERE = Path(__file__).resolve().parent

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=97, n_positions=64)).eval()
with TemporaryDirectory() as tmp:
    first, later = Path(tmp) / "decoder_model.onnx", Path(tmp) / "decoder_with_past_model.onnx"
    export(model, GPT2OnnxConfig(model.config, task="text-generation", use_past=True, use_past_in_inputs=False),
           first, opset=17)
    export(model, GPT2OnnxConfig(model.config, task="text-generation", use_past=True, use_past_in_inputs=True),
           later, opset=17)
    merge_decoders(str(first), str(later), save_path=str(HERE / "gpt2_tiny_merged_decoder.onnx"), strict=False)
