#!/usr/bin/env python3
"""The model level of scripts/study_tensor_vs_model.py through kvlab.hf on a GPU (docs/RESULTS.md).

Takes the study's options and makes the same calibration dump, methods and held-out windows
(study_tensor_vs_model.setup); with the reference model on the GPU (fp32; the methods'
quantization on kvlab's GPU kernels where they have one, else on the CPU): per window,
kvlab.hf.score of every method against the fp16 cache (ppl, delta_ppl, kl_mean, kl_max,
top1_agreement, as kvlab ppl), then each --layer-methods method on one layer at a time over
the first --layer-windows windows. Writes --out (JSON) after every window and layer, so a run cut
by --deadline-s keeps what it finished and says where it stopped. The tensor level runs beside it
on the CPU cores (study_tensor_vs_model.py --tensor-only with the same options), and
`study_tensor_vs_model.py --model-json OUT` joins the two:

    python scripts/study_model_hf.py --train-ids T.ids --codebook CB.h5 --out-dir study --out model.json
"""
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_tensor_vs_model import k_pre_rope_digest, parser, setup  # noqa: E402


def write_atomic(path, text):
    tmp = Path(f"{path}.tmp.{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def main():
    ap = parser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--deadline-s", type=float, default=1e9, help="start no window or layer after this many seconds")
    ap.add_argument("--from-window", type=int, default=0, help="score windows from this one on (an earlier run "
                                                                   "holds the others); the per-layer part still runs")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t0 = time.time()
    import torch
    import transformers

    import kvlab.hf
    work = Path(tempfile.mkdtemp(prefix="kvlab_study_hf_"))
    methods, label, layer_methods, windows, train = setup(a, work)
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).to(a.device).eval()
    device = f"{torch.cuda.get_device_name()}, torch {torch.__version__}" if a.device == "cuda" else a.device
    layer_windows = min(a.layer_windows, len(windows))
    result = {"command": " ".join(sys.argv), "device": device, "model": a.model, "window_ids": [],
              "train_k_pre_rope_sha256": k_pre_rope_digest(train) if train else None,
              "quantize_on": "cuda" if a.device == "cuda" and kvlab.has_gpu() else "cpu",
              "layer_windows": layer_windows, "windows": [], "layers": [], "cut": None, "wall_s": 0.0}
    print(f"calibration dump k_pre_rope sha256 {result['train_k_pre_rope_sha256']}; quantization on "
          f"{result['quantize_on']}", file=sys.stderr)

    def save():
        result["wall_s"] = time.time() - t0
        write_atomic(Path(a.out), json.dumps(result) + "\n")

    refs = []
    result["from_window"] = a.from_window
    for w, toks in enumerate(windows):
        if time.time() - t0 > a.deadline_s:
            result["cut"] = f"deadline: {w} of {len(windows)} windows"
            break
        t = time.time()
        ids = torch.tensor([toks], device=a.device)
        if w < a.from_window and w >= layer_windows:
            continue
        with torch.no_grad(), kvlab.hf.apply_method(model, "fp16"):
            refs.append(model(ids).logits.float())
        if w < a.from_window:
            continue
        rows = kvlab.hf.score(model, ids, methods, reference=refs[-1])
        result["windows"].append({label[m]: row for m, row in zip(methods, rows)})
        result["window_ids"].append(toks)
        save()
        print(f"window {w + 1}/{len(windows)}: {len(methods)} methods, {time.time() - t:.1f} s", file=sys.stderr)
    n_layers = model.config.num_hidden_layers
    for lay in range(n_layers):
        if result["cut"] or time.time() - t0 > a.deadline_s:
            result["cut"] = result["cut"] or f"deadline: per-layer part stopped before layer {lay} of {n_layers}"
            break
        t = time.time()
        for w in range(min(layer_windows, len(refs))):
            ids = torch.tensor([windows[w]], device=a.device)
            rows = kvlab.hf.score(model, ids, layer_methods, layers=[lay], reference=refs[w])
            for m, row in zip(layer_methods, rows):
                result["layers"].append({"window": w, "method": label[m], "layer": lay, **row})
        save()
        print(f"layer {lay}: {len(layer_methods)} methods x {min(layer_windows, len(refs))} windows, "
              f"{time.time() - t:.1f} s", file=sys.stderr)
    save()
    print(f"wall {time.time() - t0:.0f} s{'; cut: ' + result['cut'] if result['cut'] else ''}", file=sys.stderr)


if __name__ == "__main__":
    main()
