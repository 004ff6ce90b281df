#!/usr/bin/env python3
"""Tensor level against model level on the reference model (issue 14 part 4; docs/RESULTS.md).

For each held-out window (<s> + 2047 tokens of data/<model>/heldout.txt): the C++ runner dumps
q/k/v (`kvlab dump`) and `kvlab eval` gives the tensor metrics of every method (attention-score
MSE, attention-output error, attention KL); `kvlab ppl` gives the model-level damage under the
decode-faithful rule (delta ppl and logit KL against the fp16 cache), all windows in one run.
What is learned comes from a training book of the model, never the held-out text: the VQ
codebook and kvquant's key levels (`calib=dump:` of that book's dump). Per layer: each method of
--layer-methods on one layer at a time (`kvlab ppl --quant-layers L`), over the first
--layer-windows windows. Spearman rank correlations between each tensor metric and delta ppl /
logit KL, across methods and across (method, layer) pairs. Only the CLI and numpy are needed:

    /usr/bin/python3 scripts/study_tensor_vs_model.py --out-dir study

Writes study.json (everything), study_methods.csv, study_layers.csv and study_scatter.svg.

The model level can come from the Hugging Face path on a GPU instead (kvlab.hf, which reproduces
kvlab ppl within test_hf_sim's bounds): `--tensor-only` stops after the tensor level and keeps it
in tensor.json (with the windows' and the calibration book's token ids, and the k_pre_rope
digest of its dump); scripts/study_model_hf.py computes the model level from that file on the
GPU machine; `--model-json` then reads its output in place of kvlab ppl.
"""
import argparse
import csv
import hashlib
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from html import escape
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from refmodel.corpus import strip_gutenberg  # noqa: E402

# Every preset with a streaming rule but fp16 (the reference: delta ppl and KL are against the
# fp16 cache), the decodable variants of the three that have none (int8's scale over the whole
# sequence, fp8's dynamic scale, NVFP4's tensor scale: refused by check_decodable), and the Kitty
# boost sweep around kitty (0.125) and kitty-pro (0.25). The kvquant presets learn their levels
# from the first half of the evaluated text, which a decoding cache does not have: the study runs
# them with calib=dump: of the training book (--kvquant-bits), as the VQ codebook.
METHODS = ["int8:group=128", "fp8:calib=max,calib_tokens=128", "kivi-4", "kivi-2", "kivi-2-sink",
           "kitty", "kitty-pro", "mxfp4", "kitty:boost=0", "kitty:boost=0.0625", "kitty:boost=0.5",
           "kitty:boost=1"]
TENSOR = ["attn_score_mse", "attn_output_rel_err", "kl"]
MODEL = ["delta_ppl", "kl_mean"]


def method_list(text):
    """Comma-separated methods, split as kvlab's --methods: a piece whose first '=' comes before
    any ':' continues the spec before it (fp8:calib=max,calib_tokens=128, calib=dump:PATH)."""
    out = []
    for piece in filter(None, text.split(",")):
        eq, colon = piece.find("="), piece.find(":")
        if out and eq >= 0 and (colon < 0 or eq < colon):
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


def spearman(x, y):
    """Spearman's rho (Pearson of average ranks)."""
    def ranks(a):
        a = np.asarray(a, float)
        order = a.argsort(kind="stable")
        r = np.empty(len(a))
        r[order] = np.arange(len(a))
        for v in np.unique(a):  # ties share their mean rank
            r[a == v] = r[a == v].mean()
        return r
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    d = math.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / d) if d else float("nan")


def kvlab_cli(cli, *args):
    r = subprocess.run([cli, *map(str, args)], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"kvlab {' '.join(map(str, args))}: {r.stderr.strip()}")
    return r.stdout


def tokenize(cli, model_dir, text_path, work):
    """Token ids of a text file, <s> first (kvlab tokenize, the model's tokenizer.json)."""
    out = work / (text_path.stem + ".ids")
    kvlab_cli(cli, "tokenize", "--model", model_dir, "--prompt-file", text_path, "--out", out)
    return [int(x) for x in out.read_text().replace(",", " ").split()]


def write_ids(tokens, path):
    path.write_text(" ".join(map(str, tokens)) + "\n")
    return path


def dump(cli, model_dir, tokens, path):
    kvlab_cli(cli, "dump", "--model", model_dir, "--tokens", write_ids(tokens, path.with_suffix(".ids")),
              "--steps", 0, "--out", path)
    return path


def train_dump(cli, model_dir, corpus, book, n, work):
    """A dump of the first n tokens (<s> included) of a training book (never the held-out text)."""
    with tarfile.open(corpus) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith(f"/{book}.txt"))
        text, _ = strip_gutenberg(book, tf.extractfile(member).read().decode("utf-8"))
    (work / "train.txt").write_text(text)
    return dump(cli, model_dir, tokenize(cli, model_dir, work / "train.txt", work)[:n], work / "train.h5")


def k_pre_rope_digest(path):
    """sha256 over every layer's k_pre_rope (what kvquant's levels learn from), so a dump remade
    elsewhere from the same token ids can be checked to hold the same values."""
    import h5py
    h = hashlib.sha256()
    with h5py.File(path, "r") as f:
        for name in sorted(f["layers"], key=int):
            h.update(np.ascontiguousarray(f["layers"][name]["k_pre_rope"][...], dtype="<f4").tobytes())
    return h.hexdigest()


def ppl(cli, model_dir, ids, window, windows, methods, threads, layers=None):
    """kvlab ppl's JSON for `methods` over the first `windows` windows of the ids file; greedy
    generation is not used here, so it is cut to one token."""
    args = ["ppl", "--model", model_dir, "--tokens", ids, "--window", window, "--windows", windows,
            "--prompt-tokens", 1, "--generate", 1, "--methods", ",".join(methods), "--format", "json",
            "--quiet", "--threads", threads]
    if layers is not None:
        args += ["--quant-layers", layers]
    return json.loads(kvlab_cli(cli, *args))


def scatter(points, xlabel, ylabel, title, width=720, height=460):
    """points: [(label, x, y)] on log-log axes (non-positive values left out). Returns SVG text."""
    pts = [(lab, x, y) for lab, x, y in points if x > 0 and y > 0]
    lx = [math.log10(x) for _, x, _ in pts]
    ly = [math.log10(y) for _, _, y in pts]
    x0, x1 = math.floor(min(lx)), math.ceil(max(lx))
    y0, y1 = math.floor(min(ly)), math.ceil(max(ly))
    left, right, top, bottom = 70, 20, 40, 50
    pw, ph = width - left - right, height - top - bottom

    def sx(v):
        return left + (v - x0) / ((x1 - x0) or 1) * pw

    def sy(v):
        return top + ph - (v - y0) / ((y1 - y0) or 1) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11">', f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>']
    for e in range(x0, x1 + 1):
        out.append(f'<line x1="{sx(e):.1f}" y1="{top}" x2="{sx(e):.1f}" y2="{top + ph}" stroke="#eee"/>')
        out.append(f'<text x="{sx(e):.1f}" y="{top + ph + 16}" text-anchor="middle">1e{e}</text>')
    for e in range(y0, y1 + 1):
        out.append(f'<line x1="{left}" y1="{sy(e):.1f}" x2="{left + pw}" y2="{sy(e):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{sy(e) + 4:.1f}" text-anchor="end">1e{e}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">{escape(xlabel)} (log)</text>')
    out.append(f'<text x="16" y="{top + ph / 2}" text-anchor="middle" transform="rotate(-90 16 {top + ph / 2})">'
               f'{escape(ylabel)} (log)</text>')
    for (lab, _, _), a, b in zip(pts, lx, ly):
        out.append(f'<circle cx="{sx(a):.1f}" cy="{sy(b):.1f}" r="3.5" fill="#1f77b4"/>')
        out.append(f'<text x="{sx(a) + 5:.1f}" y="{sy(b) - 4:.1f}">{escape(lab)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_atomic(path, text):
    tmp = Path(f"{path}.tmp.{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def parser():
    """The study's options (scripts/study_model_hf.py adds its own to the same)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(REPO / "data" / "kvlab-ref-18m"))
    ap.add_argument("--cli", default=str(REPO / "build" / "experiments" / "kvlab"))
    ap.add_argument("--corpus", default=str(REPO.parent / "shared" / "corpus" / "gutenberg-en.tar.xz"),
                    help="the book corpus, for the training text of the VQ codebook and kvquant's levels "
                         "('': neither)")
    ap.add_argument("--calib-book", default="classics__alice_in_wonderland", help="a training book of the model")
    ap.add_argument("--calib-tokens", type=int, default=2048, help="tokens of it (<s> included) to learn from")
    ap.add_argument("--train-ids", help="the calibration tokens as ids (a file), in place of the corpus")
    ap.add_argument("--codebook", help="a VQ codebook trained on those tokens, in place of training one")
    ap.add_argument("--vq-spec", default="CQ-4c8b")
    ap.add_argument("--kvquant-bits", default="2,3,4", help="kvquant:bits=B,calib=dump:<the book> for each B")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--layer-windows", type=int, default=2)
    ap.add_argument("--layer-methods", default="kivi-2,kitty,kitty-pro,mxfp4")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out-dir", required=True)
    return ap


def setup(a, work):
    """The calibration (a dump of the training book's first tokens, the VQ codebook) and the
    held-out windows. Returns (methods, label: spec -> name, layer_methods, windows, train dump)."""
    out = Path(a.out_dir)
    methods = method_list(a.methods)
    label = {m: m for m in methods}
    kvquant_alias = {}  # kvquant-B in --layer-methods: the study's kvquant with levels from the book
    train = None
    if a.corpus or a.train_ids:
        t = time.time()
        if a.train_ids:
            ids = [int(x) for x in Path(a.train_ids).read_text().replace(",", " ").split()]
            train = dump(a.cli, a.model, ids, work / "train.h5")
        else:
            info = json.loads((Path(a.model) / "train_info.json").read_text())
            if a.calib_book not in info["split"]["train"]:
                sys.exit(f"--calib-book {a.calib_book}: not a training book of {a.model} (train_info.json split.train)")
            train = train_dump(a.cli, a.model, a.corpus, a.calib_book, a.calib_tokens, work)
        cb = Path(a.codebook) if a.codebook else out / f"vq_{a.vq_spec}.h5"
        if not a.codebook:
            kvlab_cli(a.cli, "vq", "train", train, "--spec", a.vq_spec, "--out", cb)
        label[f"vq:codebooks={cb}"] = f"vq {a.vq_spec}"
        for b in filter(None, a.kvquant_bits.split(",")):
            spec = f"kvquant:bits={b},calib=dump:{train}"
            label[spec] = f"kvquant-{b} (levels: {a.calib_book})"
            kvquant_alias[f"kvquant-{b}"] = spec
        methods = list(label)
        print(f"calibration: {a.calib_tokens} tokens of {a.calib_book}, codebook {a.vq_spec}: "
              f"{time.time() - t:.0f} s", file=sys.stderr)
    body = tokenize(a.cli, a.model, Path(a.model) / "heldout.txt", work)[1:]
    per = a.tokens - 1
    n_win = min(a.windows, len(body) // per)
    if n_win < a.windows:
        print(f"heldout.txt holds {len(body)} tokens: {n_win} windows of {a.tokens}, not {a.windows}",
              file=sys.stderr)
    bos = 1
    windows = [[bos] + body[w * per:(w + 1) * per] for w in range(n_win)]
    layer_methods = [kvquant_alias.get(m, m) for m in method_list(a.layer_methods)]
    missing = [m for m in layer_methods if m not in methods]
    if missing:
        sys.exit(f"--layer-methods {','.join(missing)}: not among the study's methods")
    return methods, label, layer_methods, windows, train


def main():
    ap = parser()
    ap.add_argument("--tensor-only", action="store_true",
                    help="stop after the tensor level, kept in OUT/tensor.json for --model-json")
    ap.add_argument("--model-json", help="the model level from scripts/study_model_hf.py (not kvlab ppl): its "
                                         "output, or several (comma-separated) whose windows (--from-window) and "
                                         "layers add up; the tensor level from OUT/tensor.json")
    a = ap.parse_args()
    out = Path(a.out_dir)
    if a.model_json:
        return from_model_json(a)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    with tempfile.TemporaryDirectory(prefix="kvlab_study_") as tmp:
        work = Path(tmp)
        methods, label, layer_methods, windows, train = setup(a, work)
        n_win = len(windows)
        # per window: the tensor metrics (a dump and kvlab eval) and the model damage (kvlab ppl on
        # that window); the results so far are written after each, so a cut run keeps them
        rows, layer_rows, evals = [], [], []
        for w, toks in enumerate(windows):
            t = time.time()
            d = dump(a.cli, a.model, toks, work / f"w{w}.h5")
            e = {r["name"]: r for r in json.loads(kvlab_cli(a.cli, "eval", d, "--methods", ",".join(methods),
                                                            "--format", "json", "--quiet", "--threads",
                                                            a.threads))["methods"]}
            evals.append(e)
            d.unlink()
            t_tensor = time.time() - t
            if a.tensor_only:
                write_tensor(a, out, windows, evals, label, layer_methods, train, t_start)
                print(f"window {w + 1}/{n_win}: tensor {t_tensor:.0f} s", file=sys.stderr)
                continue
            p = ppl(a.cli, a.model, write_ids(toks, work / "w.ids"), a.tokens, 1, methods, a.threads)
            for i, m in enumerate(methods):
                s = p["methods"][i + 1]  # fp16, the reference, comes first
                if s["name"] != m or m not in e:
                    sys.exit(f"window {w}: kvlab ppl's method {i} is {s['name']}, expected {m} (in eval: {m in e})")
                rows.append({"window": w, "method": label[m], "spec": s["spec"],
                             "bits_per_element": s["bits_per_element"], "ppl": s["ppl"],
                             "ref_ppl": p["methods"][0]["ppl"],
                             **{k: s[k] for k in ("delta_ppl", "kl_mean", "kl_max", "top1_agreement")},
                             **{k: e[m][k] for k in TENSOR}})
            print(f"window {w + 1}/{n_win}: tensor {t_tensor:.0f} s, all {time.time() - t:.0f} s", file=sys.stderr)
            write_results(a, out, rows, layer_rows, w + 1, t_start, label)
        if a.tensor_only:
            return
        # per layer: each of --layer-methods on one layer alone, over the first --layer-windows
        lw = min(a.layer_windows, n_win)
        ids = write_ids([t for w in windows[:lw] for t in w], work / "layer_windows.ids")
        for lay in range(len(evals[0][methods[0]]["layers"])):
            t = time.time()
            p = ppl(a.cli, a.model, ids, a.tokens, lw, layer_methods, a.threads, layers=str(lay))
            for i, m in enumerate(layer_methods):
                for w in range(lw):
                    e = evals[w][m]["layers"][lay]
                    sw = p["methods"][i + 1]["windows"][w]
                    layer_rows.append({"window": w, "method": label[m], "layer": lay, "delta_ppl": sw["delta_ppl"],
                                       "kl_mean": sw["kl_mean"], **{x: e[x] for x in TENSOR}})
            print(f"layer {lay}: {len(layer_methods)} methods x {lw} windows: {time.time() - t:.0f} s",
                  file=sys.stderr)
            write_results(a, out, rows, layer_rows, n_win, t_start, label)


def write_tensor(a, out, windows, evals, label, layer_methods, train, t_start):
    """tensor.json: the tensor level so far (per window, per method by its label) with what the
    model level must match: the windows' token ids and the calibration dump's k_pre_rope digest."""
    result = {"model": a.model, "tokens": a.tokens, "windows": windows, "command": " ".join(sys.argv),
              "methods": [label[m] for m in label], "layer_methods": [label[m] for m in layer_methods],
              "layer_windows": min(a.layer_windows, len(windows)),
              "train_k_pre_rope_sha256": k_pre_rope_digest(train) if train else None,
              "evals": [{label[m]: e[m] for m in label} for e in evals], "wall_s": time.time() - t_start,
              "threads": a.threads, "calibration": {"book": a.calib_book, "tokens": a.calib_tokens}}
    write_atomic(out / "tensor.json", json.dumps(result) + "\n")


def from_model_json(a):
    """The study from tensor.json (this script's --tensor-only) and the model level of
    scripts/study_model_hf.py, which must have run on the same windows and calibration dump."""
    out = Path(a.out_dir)
    tensor = json.loads((out / "tensor.json").read_text())
    model = None
    for path in a.model_json.split(","):  # runs that cover other windows (from_window) add up
        part = json.loads(Path(path).read_text())
        if model is None:
            model = part
            continue
        if part.get("from_window", 0) != len(model["windows"]):
            sys.exit(f"{path}: starts at window {part.get('from_window', 0)}, the runs before end at "
                     f"{len(model['windows'])}")
        for k in ("windows", "window_ids", "layers"):
            model[k] += part[k]
        model["layer_windows"] = max(model["layer_windows"], part["layer_windows"]) if part["layers"] else model["layer_windows"]
        model["command"] += " ; " + part["command"]
        model["wall_s"] += part["wall_s"]
        model["cut"] = part["cut"]
    if model["window_ids"] != tensor["windows"][:len(model["window_ids"])]:
        sys.exit(f"{a.model_json}: its windows' token ids are not tensor.json's")
    if model["train_k_pre_rope_sha256"] != tensor["train_k_pre_rope_sha256"]:
        sys.exit(f"{a.model_json}: its calibration dump's k_pre_rope differs from tensor.json's")
    n_win = min(len(tensor["evals"]), len(model["windows"]))
    rows, layer_rows = [], []
    for w in range(n_win):
        e, p = tensor["evals"][w], model["windows"][w]
        for m in tensor["methods"]:
            s = p[m]
            # the spec as the first window has it (the calibration dump's path differs between runs)
            rows.append({"window": w, "method": m, "spec": model["windows"][0][m]["spec"],
                         "bits_per_element": s["bits_per_element"],
                         "ppl": s["ppl"], "ref_ppl": s["ref_ppl"],
                         **{k: s[k] for k in ("delta_ppl", "kl_mean", "kl_max", "top1_agreement")},
                         **{k: e[m][k] for k in TENSOR}})
    for r in model["layers"]:
        if r["window"] < n_win:
            e = tensor["evals"][r["window"]][r["method"]]["layers"][r["layer"]]
            layer_rows.append({**{k: r[k] for k in ("window", "method", "layer", "delta_ppl", "kl_mean")},
                               **{x: e[x] for x in TENSOR}})
    a.layer_windows = model["layer_windows"]
    a.calib_book, a.calib_tokens = tensor["calibration"]["book"], tensor["calibration"]["tokens"]
    a.tokens, a.threads = tensor["tokens"], tensor["threads"]
    write_results(a, out, rows, layer_rows, n_win, time.time() - tensor["wall_s"],
                  {m: m for m in tensor["methods"]}, source=model)


def write_results(a, out, rows, layer_rows, n_win, t_start, label, source=None):
    """study.json, the CSVs and the scatter plot from the rows so far."""
    def mean_by(rs, keys, fields):
        groups = {}
        for r in rs:
            groups.setdefault(tuple(r[k] for k in keys), []).append(r)
        return [{**dict(zip(keys, g)), **{f: float(np.mean([r[f] for r in v])) for f in fields}}
                for g, v in groups.items()]

    fields = ["bits_per_element", "ppl", "ref_ppl", "delta_ppl", "kl_mean", "kl_max", "top1_agreement"] + TENSOR
    per_method = mean_by(rows, ["method", "spec"], fields)
    per_layer = mean_by(layer_rows, ["method", "layer"], MODEL + TENSOR) if layer_rows else []
    corr = {"across_methods": {t: {m: spearman([r[t] for r in per_method], [r[m] for r in per_method])
                                   for m in MODEL} for t in TENSOR}}
    if per_layer:
        corr["across_layers"] = {t: {m: spearman([r[t] for r in per_layer], [r[m] for r in per_layer])
                                     for m in MODEL} for t in TENSOR}
        corr["within_method_across_layers"] = {
            meth: {t: {m: spearman([r[t] for r in per_layer if r["method"] == meth],
                                   [r[m] for r in per_layer if r["method"] == meth]) for m in MODEL}
                   for t in TENSOR} for meth in dict.fromkeys(r["method"] for r in per_layer)}
    wall = time.time() - t_start
    result = {"model": a.model, "windows": n_win, "tokens": a.tokens, "layer_windows": min(a.layer_windows, n_win),
              "methods": per_method, "layers": per_layer, "spearman": corr, "per_window": rows,
              "per_window_layers": layer_rows, "wall_s": wall, "command": " ".join(sys.argv),
              "threads": a.threads, "calibration": {"book": a.calib_book, "tokens": a.calib_tokens},
              "model_level": "kvlab ppl" if source is None else {k: source[k] for k in ("command", "device", "wall_s",
                                                                                            "cut")}}
    write_atomic(out / "study.json", json.dumps(result, indent=1) + "\n")
    for name, rs in (("study_methods.csv", per_method), ("study_layers.csv", per_layer)):
        if rs:
            tmp = out / f"{name}.tmp.{os.getpid()}"
            with open(tmp, "w", newline="") as f:
                wr = csv.DictWriter(f, fieldnames=list(rs[0]))
                wr.writeheader()
                wr.writerows(rs)
            tmp.replace(out / name)
    write_atomic(out / "study_scatter.svg", scatter(
        [(r["method"], r["attn_output_rel_err"], r["kl_mean"]) for r in per_method],
        "attention output relative error (kvlab eval)", "logit KL, mean (kvlab ppl)",
        f"reference model, {n_win} x {a.tokens} held-out tokens: tensor vs model level"))
    print(f"{'method':<34} {'bits':>6} {'dPPL':>9} {'KL':>9} {'top1':>6} {'scoreMSE':>9} {'outErr':>8} {'attnKL':>8}")
    for r in sorted(per_method, key=lambda r: r["kl_mean"]):
        print(f"{r['method']:<34} {r['bits_per_element']:6.3f} {r['delta_ppl']:9.4f} {r['kl_mean']:9.2e} "
              f"{r['top1_agreement']:6.3f} {r['attn_score_mse']:9.2e} {r['attn_output_rel_err']:8.4f} {r['kl']:8.2e}")
    print(json.dumps(corr, indent=1))
    print(f"wall {wall:.0f} s")


if __name__ == "__main__":
    main()
