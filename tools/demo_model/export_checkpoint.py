#!/usr/bin/env python3
# Exports a train.py checkpoint (f32 weights + optimizer) as a bf16 save_pretrained folder.
"""Used when a run must ship from its last checkpoint, and to try finalize.py on a run in progress."""
import argparse
import json

import torch
from transformers import Qwen2MoeForCausalLM

from train import make_config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--log", required=True, help="train.log of the run (its start record holds the sizes)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.log) as f:
        start = next(json.loads(l) for l in f if '"event": "start"' in l)
    config = make_config(argparse.Namespace(**start["args"]))
    model = Qwen2MoeForCausalLM._from_config(config)
    ck = torch.load(args.ckpt, weights_only=False)
    model.load_state_dict(ck["model"])
    model.to(torch.bfloat16).save_pretrained(args.out)
    print("exported step", ck["step"], "tokens", ck["tokens"], "to", args.out)


if __name__ == "__main__":
    main()
