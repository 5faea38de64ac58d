#!/usr/bin/python3
"""An independent reader of Hugging Face Llama directories: numpy only.

It knows nothing of ringtrain: it reads model.safetensors (through numpy_gpt2's reader
of the file format) and config.json, and runs the forward pass as transformers'
LlamaForCausalLM defines it (RMSNorm before attention and MLP, rotary embeddings with
rotate_half over q and k, causal softmax attention, SwiGLU MLP down(silu(gate) * up),
final RMSNorm, lm_head or the tied embed_tokens), in float64.

    numpy_llama.py MODEL_DIR 12,7,1033      # prints the next-token logits as JSON
"""
import json
import math
import sys

import numpy as np

from numpy_gpt2 import read_safetensors


class Llama:
    def __init__(self, model_dir):
        with open(f"{model_dir}/config.json", encoding="utf-8") as f:
            self.config = json.load(f)
        c = self.config
        if c.get("model_type") != "llama":
            raise ValueError(f"model_type {c.get('model_type')} is not llama")
        if c.get("hidden_act") != "silu":
            raise ValueError(f"activation {c.get('hidden_act')} not supported here")
        if c["num_key_value_heads"] != c["num_attention_heads"]:
            raise ValueError("grouped-query attention not supported here")
        self.tensors, self.metadata = read_safetensors(f"{model_dir}/model.safetensors")
        self.w = {k: v.astype(np.float64) for k, v in self.tensors.items()}
        self.n_layer, self.n_head = c["num_hidden_layers"], c["num_attention_heads"]
        self.eps, self.theta = c["rms_norm_eps"], c["rope_theta"]
        tied = c.get("tie_word_embeddings", True)
        self.lm_head = self.w["model.embed_tokens.weight"] if tied else self.w["lm_head.weight"]

    def rms_norm(self, x, name):
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps) * self.w[name]

    def linear(self, x, name):  # nn.Linear: weight (out, in)
        return x @ self.w[name].T

    def rope(self, x):
        """x (H, T, hs): q * cos + rotate_half(q) * sin, as transformers applies it."""
        hs, T = x.shape[-1], x.shape[1]
        inv_freq = 1.0 / self.theta ** (np.arange(0, hs, 2) / hs)
        angles = np.outer(np.arange(T), inv_freq)  # (T, hs/2)
        cos = np.cos(np.concatenate([angles, angles], axis=-1))
        sin = np.sin(np.concatenate([angles, angles], axis=-1))
        half = hs // 2
        rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rotated * sin

    def logits(self, ids):
        """Logits (len(ids), vocab) for every position."""
        T = len(ids)
        x = self.w["model.embed_tokens.weight"][ids]
        C = x.shape[1]
        H, hs = self.n_head, C // self.n_head
        mask = np.triu(np.full((T, T), -np.inf), k=1)
        for l in range(self.n_layer):
            p = f"model.layers.{l}."
            h = self.rms_norm(x, p + "input_layernorm.weight")
            q, k, v = (self.linear(h, p + f"self_attn.{n}_proj.weight").reshape(T, H, hs)
                       .transpose(1, 0, 2) for n in "qkv")
            q, k = self.rope(q), self.rope(k)
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(hs) + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            att = scores / scores.sum(axis=-1, keepdims=True)
            y = (att @ v).transpose(1, 0, 2).reshape(T, C)
            x = x + self.linear(y, p + "self_attn.o_proj.weight")
            h = self.rms_norm(x, p + "post_attention_layernorm.weight")
            gate = self.linear(h, p + "mlp.gate_proj.weight")
            up = self.linear(h, p + "mlp.up_proj.weight")
            x = x + self.linear(gate / (1.0 + np.exp(-gate)) * up, p + "mlp.down_proj.weight")
        return self.rms_norm(x, "model.norm.weight") @ self.lm_head.T


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ids = [int(i) for i in sys.argv[2].split(",")]
    print(json.dumps(Llama(sys.argv[1]).logits(ids)[-1].tolist()))


if __name__ == "__main__":
    main()
