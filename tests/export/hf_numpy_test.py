#!/usr/bin/python3
"""Safetensors export read back by an independent reader (tests/export/numpy_gpt2.py,
or numpy_llama.py for a fixture of arch llama).

    hf_numpy_test.py RINGTRAIN_BINARY FIXTURE_DIR      (FIXTURE_DIR from make_fixture.sh)

Exports the fixture's checkpoint as a Hugging Face directory in f32, f16 and bf16 and
checks that:
  - the directory holds exactly the files transformers reads, config.json describes
    GPT2LMHeadModel (LlamaForCausalLM) with the checkpoint's shape, the tokenizer is the data's
    tokenizer.model byte for byte, and tokenizer_config.json names LlamaTokenizer
    without BOS/EOS insertion;
  - the numpy GPT-2 (Llama) forward pass over the f32 file gives ringtrain's logits
    (`sample --json --logits --precision fp32`) within 1e-4 for a Vietnamese prompt,
    random ids filling the whole context, and a single id;
  - every f16 / bf16 tensor is the f32 tensor rounded to nearest even.
Installs python3-numpy (apt-get) if it is missing. Exits 1 on any mismatch.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

TOLERANCE = 1e-4
PROMPT = "Đà Nẵng có 8 quận, huyện; năm 2019 dân số là 1.134.310 người.\nViệt Nam nằm ở Đông Nam Á."
FILES = sorted(["model.safetensors", "config.json", "generation_config.json", "tokenizer.model",
                "tokenizer_config.json", "special_tokens_map.json", "README.md"])


def ensure_numpy():
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("installing python3-numpy (apt-get)", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "python3-numpy"], check=True, env=env)
        os.execv(sys.executable, [sys.executable] + sys.argv)


failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures += 1


def main():
    ensure_numpy()
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from numpy_gpt2 import Gpt2, read_safetensors
    from numpy_llama import Llama

    binary, fixture = sys.argv[1], sys.argv[2]
    ckpt = os.path.join(fixture, "ckpt")
    work = tempfile.mkdtemp(prefix="rt_export_hf_")
    try:
        def ringtrain(*args):
            r = subprocess.run([binary, *args], capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                raise RuntimeError(f"ringtrain {' '.join(args[:1])} failed: {r.stderr}")
            return r.stdout

        dirs = {}
        for dtype in ("f32", "f16", "bf16"):
            dirs[dtype] = os.path.join(work, f"hf-{dtype}")
            print(ringtrain("export", "--ckpt", ckpt, "--out", dirs[dtype], "--format",
                            "safetensors", "--dtype", dtype).strip().splitlines()[-1])

        # The files and what they say.
        check(sorted(os.listdir(dirs["f32"])) == FILES, f"the directory holds {', '.join(FILES)}")
        with open(os.path.join(dirs["f32"], "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        with open(os.path.join(fixture, "shape.json"), encoding="utf-8") as f:
            shape = json.load(f)
        llama = shape.get("arch") == "llama"
        Model = Llama if llama else Gpt2
        if llama:
            check(config["architectures"] == ["LlamaForCausalLM"] and
                  config["model_type"] == "llama", "config.json: LlamaForCausalLM")
            check((config["num_hidden_layers"], config["num_attention_heads"],
                   config["hidden_size"], config["max_position_embeddings"],
                   config["vocab_size"]) == (shape["layers"], shape["heads"], shape["dim"],
                                             shape["seq_len"], shape["vocab"]),
                  f"config.json: the checkpoint's shape {shape}")
            check(config["tie_word_embeddings"] is False and config["hidden_act"] == "silu"
                  and config["attention_bias"] is False,
                  "config.json: untied LM head (as the fixture trained), silu, no biases")
        else:
            check(config["architectures"] == ["GPT2LMHeadModel"] and
                  config["model_type"] == "gpt2", "config.json: GPT2LMHeadModel")
            check((config["n_layer"], config["n_head"], config["n_embd"], config["n_positions"],
                   config["vocab_size"]) == (shape["layers"], shape["heads"], shape["dim"],
                                             shape["seq_len"], shape["vocab"]),
                  f"config.json: the checkpoint's shape {shape}")
            check(config["tie_word_embeddings"] is True and
                  config["activation_function"] == "gelu_new",
                  "config.json: tied LM head, tanh GELU")
        with open(os.path.join(dirs["f32"], "tokenizer.model"), "rb") as f:
            exported_tokenizer = f.read()
        with open(os.path.join(fixture, "data", "tokenizer.model"), "rb") as f:
            check(exported_tokenizer == f.read(), "tokenizer.model is the data's, byte for byte")
        with open(os.path.join(dirs["f32"], "tokenizer_config.json"), encoding="utf-8") as f:
            tok_config = json.load(f)
        check(tok_config["tokenizer_class"] == "LlamaTokenizer" and tok_config["legacy"] is True
              and tok_config["add_bos_token"] is False and tok_config["add_eos_token"] is False
              and tok_config["add_prefix_space"] is False,
              "tokenizer_config.json: LlamaTokenizer, legacy, no BOS/EOS, no prefix space")
        with open(os.path.join(dirs["f32"], "README.md"), encoding="utf-8") as f:
            check("Training data licence: CC BY-SA 3.0/4.0 (Vietnamese Wikipedia contributors)."
                  in f.read(), "the model card carries the licence given to prepare --license")
        tensors32, metadata = read_safetensors(os.path.join(dirs["f32"], "model.safetensors"))
        check(metadata.get("format") == "pt", "safetensors metadata has format=pt")
        if llama:
            check("lm_head.weight" in tensors32 and
                  tensors32["model.layers.0.mlp.gate_proj.weight"].shape ==
                  (config["intermediate_size"], shape["dim"]) and
                  not any(name.endswith(".bias") for name in tensors32),
                  "lm_head.weight (untied); gate_proj (F, C) in nn.Linear orientation; no biases")
        else:
            check("lm_head.weight" not in tensors32 and
                  tensors32["transformer.h.0.attn.c_attn.weight"].shape ==
                  (shape["dim"], 3 * shape["dim"]),
                  "no lm_head.weight (tied); c_attn.weight in Conv1D orientation (C, 3C)")

        # Logits: numpy over the f32 file against ringtrain.
        model = Model(dirs["f32"])
        rng = random.Random(15)
        cases = [("Vietnamese prompt", ["--prompt", PROMPT]),
                 (f"{shape['seq_len']} random ids (the whole context)",
                  ["--prompt-ids", ",".join(str(rng.randrange(shape["vocab"]))
                                            for _ in range(shape["seq_len"]))]),
                 ("one id", ["--prompt-ids", "7"])]
        prompt_ids, f32_logits = None, None
        for name, prompt_args in cases:
            out = json.loads(ringtrain("sample", "--ckpt", ckpt, *prompt_args, "--tokens=0",
                                       "--json", "--logits", "--precision=fp32", "--threads=1"))
            ours = np.array(out["logits"][0], dtype=np.float64)
            theirs = model.logits(out["prompt_ids"])[-1]
            if prompt_ids is None:
                prompt_ids, f32_logits = out["prompt_ids"], theirs
            diff = float(np.max(np.abs(ours - theirs)))
            check(diff < TOLERANCE, f"{name} ({len(out['prompt_ids'])} ids): max |logit diff| "
                  f"{diff:.2e} (< {TOLERANCE}; logits span {ours.min():.2f}..{ours.max():.2f})")

        # f16 and bf16: each tensor rounded to nearest even from the f32 one.
        for dtype in ("f16", "bf16"):
            tensors, _ = read_safetensors(os.path.join(dirs[dtype], "model.safetensors"))
            same_names = sorted(tensors) == sorted(tensors32)
            exact = same_names
            for name, t32 in tensors32.items():
                if not same_names:
                    break
                if dtype == "f16":
                    want = t32.astype(np.float16)  # numpy rounds to nearest even
                    got = tensors[name]
                    exact &= got.dtype == np.float16 and np.array_equal(
                        got.view(np.uint16), want.view(np.uint16))
                else:
                    bits = t32.view(np.uint32).astype(np.uint64)
                    want = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint32) << 16
                    exact &= np.array_equal(tensors[name].view(np.uint32), want)
            check(exact, f"{dtype}: every tensor is the f32 one rounded to nearest even")
            d = float(np.max(np.abs(Model(dirs[dtype]).logits(prompt_ids)[-1] - f32_logits)))
            print(f"     {dtype}: logits of the prompt differ from f32 by at most {d:.2e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("safetensors check passed" if failures == 0 else f"safetensors check: {failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
