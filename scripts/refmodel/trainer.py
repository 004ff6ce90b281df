"""The model (transformers' LlamaForCausalLM, no code of our own), its learning-rate schedule, one
training run and the evaluation. Needs torch and transformers."""
import math
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from .data import windows
from .tokenizer import BOS, EOS


def llama_config(hp, vocab_size):
    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=hp["hidden"], intermediate_size=hp["intermediate"],
        num_hidden_layers=hp["layers"], num_attention_heads=hp["heads"], num_key_value_heads=hp["kv_heads"],
        head_dim=hp["head_dim"], max_position_embeddings=hp["context"], rope_theta=hp["rope_theta"],
        rms_norm_eps=hp["rms_norm_eps"], tie_word_embeddings=hp["tie_embeddings"],
        initializer_range=hp["init_std"], hidden_act="silu", attention_bias=False, mlp_bias=False,
        bos_token_id=BOS, eos_token_id=EOS, architectures=["LlamaForCausalLM"])


def build_model(hp, vocab_size, seed):
    """The initial weights come from the CPU generator, so they are the same on any machine."""
    torch.manual_seed(seed)
    return LlamaForCausalLM._from_config(llama_config(hp, vocab_size), attn_implementation="sdpa",
                                         dtype=torch.float32)


def lr_at(step, hp):
    """Linear warm-up over `warmup` steps, then cosine from lr to min_lr_ratio * lr at the last step."""
    if step < hp["warmup"]:
        return hp["lr"] * (step + 1) / hp["warmup"]
    t = (step - hp["warmup"]) / max(1, hp["steps"] - 1 - hp["warmup"])
    floor = hp["min_lr_ratio"]
    return hp["lr"] * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def optimizer(model, hp, device):
    """AdamW; weight decay on matrices only (not on the RMSNorm gains)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": hp["weight_decay"]}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]),
                             fused=device.type == "cuda")


def autocast(device):
    """bf16 autocast on the GPU (SDPA then runs flash attention); plain fp32 on the CPU."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


@torch.no_grad()
def evaluate(model, tokens, starts, hp, device):
    """Mean next-token loss (nats) over the windows at `starts`, every target counted once."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(starts), hp["batch"]):
        x = torch.from_numpy(windows(tokens, starts[i:i + hp["batch"]], hp["context"])).to(device)
        with autocast(device):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].float().flatten(0, 1), x[:, 1:].flatten(),
                                                 reduction="sum")
        total += loss.item()
        count += x[:, 1:].numel()
    model.train()
    return total / count


def train(model, train_tokens, order, evals, hp, device, log, deadline):
    """Run the steps of `order` ((steps, batch) window starts). `evals` maps a name to (tokens,
    starts) measured every eval_every steps. Returns (curve rows, steps done, stopped early)."""
    opt = optimizer(model, hp, device)
    model.train()
    rows, window_losses = [], []
    tokens_per_step = hp["batch"] * hp["context"]
    t_start = t_log = time.time()
    for step in range(hp["steps"]):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, hp)
        x = torch.from_numpy(windows(train_tokens, order[step], hp["context"])).to(device, non_blocking=True)
        with autocast(device):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), hp["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        window_losses.append(loss.detach())
        done = step + 1
        if done % hp["log_every"] == 0 or done == hp["steps"]:
            train_loss = torch.stack(window_losses).mean().item()
            window_losses = []
            now = time.time()
            rate = hp["log_every"] * tokens_per_step / max(now - t_log, 1e-9)
            eta = (now - t_start) / done * (hp["steps"] - done)
            row = {"step": done, "tokens": done * tokens_per_step, "lr": lr_at(step, hp), "train_loss": train_loss}
            msg = (f"step {done}/{hp['steps']} loss {train_loss:.4f} lr {row['lr']:.2e} "
                   f"grad-norm {grad_norm.item():.2f} | {rate / 1e3:.0f}k tok/s | {now - t_start:.0f} s, ETA {eta:.0f} s")
            if done % hp["eval_every"] == 0 or done == hp["steps"]:
                for name, (tokens, starts) in evals.items():
                    row[f"{name}_loss"] = evaluate(model, tokens, starts, hp, device)
                    msg += f" | {name} {row[name + '_loss']:.4f}"
            rows.append(row)
            log(msg)
            t_log = time.time()
            if not np.isfinite(train_loss):
                raise RuntimeError(f"training diverged at step {done}: loss {train_loss}")
            if time.time() > deadline and done < hp["steps"]:
                log(f"WARNING: --time-limit-s reached after step {done} of {hp['steps']}: training stops here")
                return rows, done, True
    return rows, hp["steps"], False
