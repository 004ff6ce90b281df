"""Wall time of kvlab.hf.score on the reference model (issue 14's HF-path goal: the 7 presets,
i.e. the fp16 reference and kvlab ppl's 6 default methods, over 2048 held-out tokens), split into
the method's quantization (Method.decode_final: core's rule, its round trips on the GPU kernels
for a CUDA model and a CUDA build, else on the CPU), the rest of kvlab's attention, and the
model's own layers; plus the model's plain sdpa forward for scale.

    PYTHONPATH=build/bindings/python .venv-hf/bin/python benchmarks/hf_score_time.py [--device cuda] [--reps 3]
"""
import argparse
import statistics
import time
from pathlib import Path

import torch
import transformers

import kvlab
import kvlab.hf
from kvlab import _api
from kvlab.hf import _attention

METHODS = ["int8:group=128", "kivi-4", "kivi-2", "kivi-2-sink", "kitty", "kitty-pro"]  # kvlab ppl's default


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(Path(__file__).resolve().parents[1] / "data" / "kvlab-ref-18m"))
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    tok = transformers.AutoTokenizer.from_pretrained(a.model)
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).to(dev).eval()
    text = (Path(a.model) / "heldout.txt").read_text()
    ids = torch.tensor(tok(text)["input_ids"][:a.tokens], device=dev)[None]
    print(f"{a.device} ({torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'CPU'}), torch {torch.__version__}, "
          f"transformers {transformers.__version__}, {torch.get_num_threads()} CPU threads, ids {tuple(ids.shape)}")

    spent = {"decode_final": 0.0, "attention": 0.0}
    final, attend = _api.Method.decode_final, _attention.kvlab_attention

    def timed_final(self, *args, **kw):
        t = time.perf_counter()
        try:
            return final(self, *args, **kw)
        finally:
            spent["decode_final"] += time.perf_counter() - t

    def timed_attention(*args, **kw):
        sync()
        t = time.perf_counter()
        try:
            return attend(*args, **kw)
        finally:
            sync()
            spent["attention"] += time.perf_counter() - t

    _api.Method.decode_final, _attention.kvlab_attention = timed_final, timed_attention
    with torch.no_grad():
        model(ids)  # warm-up (kernels, allocator)
        sync()
        plain = []
        for _ in range(a.reps):
            t = time.perf_counter()
            model(ids)
            sync()
            plain.append(time.perf_counter() - t)
        kvlab.hf.score(model, ids[:, :256], METHODS[:1])  # warm-up of the kvlab path
        rows = []
        for _ in range(a.reps):
            spent.update(decode_final=0.0, attention=0.0)
            sync()
            t = time.perf_counter()
            res = kvlab.hf.score(model, ids, METHODS)
            sync()
            total = time.perf_counter() - t
            rows.append((total, spent["decode_final"], spent["attention"] - spent["decode_final"],
                         total - spent["attention"]))
    med = [statistics.median(r[i] for r in rows) for i in range(4)]
    print(f"plain sdpa forward: median {statistics.median(plain):.4f} s ({', '.join(f'{x:.4f}' for x in plain)})")
    print(f"kvlab.hf.score, 7 forwards (fp16 reference + {len(METHODS)} methods), {a.reps} runs: "
          f"{', '.join(f'{r[0]:.2f}' for r in rows)} s; median {med[0]:.2f} s = quantization (decode_final) "
          f"{med[1]:.2f} + kvlab attention without it {med[2]:.2f} + model layers and metrics {med[3]:.2f}")
    for r in res:
        print(f"  {r['name']:16} ppl {r['ppl']:.4f}  delta {r['delta_ppl']:+.4f}  kl_mean {r['kl_mean']:.3e}")


if __name__ == "__main__":
    main()
