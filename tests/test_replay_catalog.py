"""The model catalog and Hugging Face configs: bytes per token by the published formulas."""

from __future__ import annotations

import json

import pytest

from kvtrace.errors import ConfigError
from kvtrace.replay.catalog import catalog_names, load_model, model_from_hf_config, resolve_model


def _gqa(layers, kv_heads, head_dim, nbytes):
    return 2 * layers * kv_heads * head_dim * nbytes


@pytest.mark.parametrize(
    "name,want",
    [
        ("Llama-3.1-8B", _gqa(32, 8, 128, 2)),
        ("Llama-3.1-70B", _gqa(80, 8, 128, 2)),
        ("Qwen3-32B", _gqa(64, 8, 128, 2)),
        ("Qwen3-235B-A22B", _gqa(94, 4, 128, 2)),
        ("DeepSeek-V3", (512 + 64) * 61 * 2),  # MLA: latent + shared RoPE key per layer
        ("gpt-oss-120b", _gqa(18, 8, 64, 2)),  # only the 18 full-attention layers grow
        ("MiniMax-M2.7", _gqa(62, 8, 128, 2)),
        ("Qwen3-Next-80B-A3B", _gqa(12, 2, 256, 2)),  # 12 of 48 layers keep KV
    ],
)
def test_bytes_per_token_follow_the_formulas(name, want):
    assert load_model(name).bytes_per_token == want
    assert load_model(name, "fp8").bytes_per_token == want // 2


def test_minimax_m27_fp8_is_124_kib_per_token():
    assert resolve_model("MiniMax-M2.7:fp8").bytes_per_token == 126_976 == 124 * 1024


def test_window_and_state_do_not_grow_with_the_context():
    oss = load_model("gpt-oss-120b")
    assert oss.sliding_bytes_per_seq == 18 * 128 * 2 * 8 * 64 * 2
    assert oss.bytes_per_block(512) == 512 * oss.bytes_per_token + 18 * 128 * 2 * 8 * 64 * 2
    nxt = load_model("Qwen3-Next-80B-A3B")
    assert nxt.state_bytes_per_seq == 36 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2
    assert load_model("Llama-3.1-8B").bytes_per_block(16) == 16 * 131_072


def test_catalog_covers_the_required_models():
    names = {n.lower() for n in catalog_names()}
    for want in (
        "llama-3.1-8b",
        "llama-3.1-70b",
        "qwen3-32b",
        "qwen3-235b-a22b",
        "deepseek-v3",
        "gpt-oss-120b",
        "minimax-m2",
        "qwen3-next-80b-a3b",
    ):
        assert want in names
    assert load_model("meta-llama/Llama-3.1-70B-Instruct").name == "Llama-3.1-70B"


@pytest.mark.parametrize(
    "cfg,bpt",
    [
        (
            {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096},
            _gqa(32, 8, 128, 2),
        ),
        (
            {
                "model_type": "deepseek_v3",
                "num_hidden_layers": 61,
                "num_attention_heads": 128,
                "kv_lora_rank": 512,
                "qk_rope_head_dim": 64,
                "hidden_size": 7168,
            },
            576 * 61 * 2,
        ),
        (
            {
                "num_hidden_layers": 4,
                "num_attention_heads": 8,
                "num_key_value_heads": 2,
                "head_dim": 64,
                "layer_types": ["sliding_attention", "full_attention"] * 2,
                "sliding_window": 128,
            },
            _gqa(2, 2, 64, 2),
        ),
        (
            {
                "text_config": {
                    "num_hidden_layers": 8,
                    "num_attention_heads": 16,
                    "num_key_value_heads": 2,
                    "head_dim": 256,
                    "full_attention_interval": 4,
                    "linear_num_value_heads": 32,
                    "linear_num_key_heads": 16,
                    "linear_key_head_dim": 128,
                    "linear_value_head_dim": 128,
                    "linear_conv_kernel_dim": 4,
                }
            },
            _gqa(2, 2, 256, 2),
        ),
        (
            {
                "num_hidden_layers": 3,
                "num_attention_heads": 8,
                "num_key_value_heads": 8,
                "head_dim": 16,
                "attn_type_list": [0, 1, 1],
            },
            _gqa(2, 8, 16, 2),
        ),
    ],
)
def test_hugging_face_configs(tmp_path, cfg, bpt):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert model_from_hf_config(path).bytes_per_token == bpt
    assert load_model(str(path), "fp8").bytes_per_token == bpt // 2
    assert load_model(str(tmp_path)).bytes_per_token == bpt


def test_unknown_models_and_bad_configs_say_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="Llama-3.1-8B"):
        load_model("llama-9")
    with pytest.raises(ConfigError, match="dtype"):
        load_model("Llama-3.1-8B", "int3")
    bad = tmp_path / "config.json"
    bad.write_text("{}")
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        load_model(str(bad))
