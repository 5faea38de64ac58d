#!/usr/bin/python3
"""An independent reader of Hugging Face GPT-2 directories: numpy only.

It knows nothing of ringtrain: it reads model.safetensors (the file format from its
specification: an 8-byte little-endian header length, a JSON header, raw tensors) and
config.json, and runs GPT-2's forward pass as transformers' GPT2LMHeadModel defines it
(pre-LayerNorm blocks, Conv1D weights of shape (in, out), causal softmax attention,
gelu_new, final LayerNorm, LM head tied to wte), in float64.

    numpy_gpt2.py MODEL_DIR 12,7,1033      # prints the next-token logits as JSON
"""
import json
import math
import struct
import sys

import numpy as np


def read_safetensors(path):
    """{name: float32 or float16 numpy array}, metadata."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    end_of_data = 0
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        dtype = info["dtype"]
        if dtype == "F32":
            values = np.frombuffer(raw, dtype="<f4")
        elif dtype == "F16":
            values = np.frombuffer(raw, dtype="<f2")
        elif dtype == "BF16":  # the top 16 bits of a float32
            values = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
        shape = info["shape"]
        if values.size != math.prod(shape):
            raise ValueError(f"{path}: tensor {name}: {values.size} values for shape {shape}")
        tensors[name] = values.reshape(shape)
        end_of_data = max(end_of_data, end)
    if end_of_data != len(data):
        raise ValueError(f"{path}: {len(data) - end_of_data} bytes after the last tensor")
    return tensors, metadata


class Gpt2:
    def __init__(self, model_dir):
        with open(f"{model_dir}/config.json", encoding="utf-8") as f:
            self.config = json.load(f)
        c = self.config
        if c.get("model_type") != "gpt2":
            raise ValueError(f"model_type {c.get('model_type')} is not gpt2")
        if c.get("activation_function") not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"activation {c.get('activation_function')} not supported here")
        self.tensors, self.metadata = read_safetensors(f"{model_dir}/model.safetensors")
        self.n_layer, self.n_head = c["n_layer"], c["n_head"]
        self.eps = c["layer_norm_epsilon"]
        t = {k.removeprefix("transformer."): v.astype(np.float64) for k, v in self.tensors.items()}
        self.w = t
        self.lm_head = t.get("lm_head.weight", t["wte.weight"])  # tied unless stored

    def layer_norm(self, x, prefix):
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.w[prefix + ".weight"] + self.w[prefix + ".bias"]

    def conv1d(self, x, prefix):  # GPT-2's Conv1D: weight (in, out)
        return x @ self.w[prefix + ".weight"] + self.w[prefix + ".bias"]

    @staticmethod
    def gelu_new(x):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    def logits(self, ids):
        """Logits (len(ids), vocab) for every position."""
        T = len(ids)
        if T > self.config["n_positions"]:
            raise ValueError(f"{T} tokens, the model has {self.config['n_positions']} positions")
        x = self.w["wte.weight"][ids] + self.w["wpe.weight"][:T]
        C = x.shape[1]
        H, hs = self.n_head, C // self.n_head
        mask = np.triu(np.full((T, T), -np.inf), k=1)
        for l in range(self.n_layer):
            p = f"h.{l}."
            qkv = self.conv1d(self.layer_norm(x, p + "ln_1"), p + "attn.c_attn")
            q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(T, H, hs).transpose(1, 0, 2)
                       for i in range(3))
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(hs) + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            att = scores / scores.sum(axis=-1, keepdims=True)
            y = (att @ v).transpose(1, 0, 2).reshape(T, C)
            x = x + self.conv1d(y, p + "attn.c_proj")
            h = self.gelu_new(self.conv1d(self.layer_norm(x, p + "ln_2"), p + "mlp.c_fc"))
            x = x + self.conv1d(h, p + "mlp.c_proj")
        return self.layer_norm(x, "ln_f") @ self.lm_head.T


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ids = [int(i) for i in sys.argv[2].split(",")]
    print(json.dumps(Gpt2(sys.argv[1]).logits(ids)[-1].tolist()))


if __name__ == "__main__":
    main()
