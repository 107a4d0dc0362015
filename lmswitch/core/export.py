"""Export a steering setting as a PEFT LoRA adapter on the output head, for runtimes that load adapters.

A setting steers the head input, ``logits = E (c + M c)`` with ``M = Σ εᵢ ε0ᵢ Wᵢ``,
so the change of the logits is ``E M c``: a low-rank change of the head itself.
With ``M = U S Vᵀ`` (rank ``r``) it is exactly a LoRA on the head,
``A = Vᵀ`` (r × d) and ``B = E U S`` (V × r), with scaling 1. Scaling the
adapter scales ε; two adapters active together add their changes, as switches do.
A tied input embedding is not touched: the adapter's matrices are separate.
``rank`` truncates ``M`` to its top singular directions (runtimes cap LoRA ranks);
the report says how much of the logit change that keeps.

>>> report = export_peft(lm, [(sentiment, 6.0)], "sentiment-peft")         # doctest: +SKIP
>>> PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(...), "sentiment-peft")   # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from lmswitch.core.models import LanguageModel
from lmswitch.core.steering import Setting, check_setting, steering_matrix

ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
FIDELITY_TEXT = ("The committee met on Tuesday to talk about the new rules for parking near the market, and most of the people "
                 "who came said the plan was fair, though a few worried about the cost for small shops.")


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote and how faithful it is at the exported ε."""

    out: str
    rank: int  # the adapter's rank
    full_rank: int  # the rank of the steering matrix before truncation
    kept_energy: float  # share of ‖M‖²_F kept by the truncation (1.0: exact)
    relative_logit_error: float  # ‖Δlogits_adapter − Δlogits_switch‖ / ‖Δlogits_switch‖ on a reference text
    target_module: str
    setting: dict[str, float]  # switch name → ε

    def to_dict(self) -> dict:
        return asdict(self)


def head_module_name(lm: LanguageModel) -> str:
    """The dotted name of the output head inside the model (PEFT's ``target_modules``)."""
    for name, module in lm.model.named_modules():
        if module is lm.head:
            return name
    raise ValueError(f"model '{lm.name}' has no named output head module; it cannot take a LoRA adapter")


def lora_factors(lm: LanguageModel, setting: Setting, rank: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int, float]:
    """``(A, B, full rank, kept energy)``: ``B @ A`` is the logit change ``E M`` of ``setting``, truncated to ``rank``."""
    check_setting(lm, setting)
    M = steering_matrix(setting)
    if M is None:
        raise ValueError("every ε is 0: there is nothing to export (the adapter would be the base model)")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 1):
        raise ValueError(f"rank must be a positive integer; got {rank!r}")
    U, S, Vh = torch.linalg.svd(M.double())
    tol = S.max() * max(M.shape) * torch.finfo(torch.float32).eps
    full = int((S > tol).sum())
    r = min(rank or full, full)
    kept = float((S[:r] ** 2).sum() / (S**2).sum())
    E = lm.head_weight().double()
    A = Vh[:r]  # (r, d)
    B = E @ (U[:, :r] * S[:r])  # (V, r)
    return A.float().contiguous(), B.float().contiguous(), full, kept


def _fidelity(lm: LanguageModel, setting: Setting, A: torch.Tensor, B: torch.Tensor) -> float:
    """Relative error of the adapter's logit change against the switch's, over every position of a reference text."""
    ids = lm.tokenizer(FIDELITY_TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        c = lm.final_hidden(ids)[0].float()
        M = steering_matrix(setting).to(c.device)
        want = lm.raw_logits(c @ M.T, bias=False)  # the switch's logit change, before any soft-capping
        got = (c @ A.T.to(c.device)) @ B.T.to(c.device)
    return float((got - want).norm() / want.norm().clamp_min(1e-12))


def export_peft(lm: LanguageModel, setting: Setting, out: str | os.PathLike, *, rank: int | None = None) -> ExportReport:
    """Write ``setting`` as a PEFT LoRA adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``)."""
    A, B, full, kept = lora_factors(lm, setting, rank)
    target = head_module_name(lm)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    r = A.shape[0]
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": lm.source or lm.name,
        "r": r, "lora_alpha": r, "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
        "target_modules": [target], "inference_mode": True, "use_rslora": False, "use_dora": False, "init_lora_weights": True,
    }
    tensors = {f"base_model.model.{target}.lora_A.weight": A.cpu(), f"base_model.model.{target}.lora_B.weight": B.cpu()}
    save_file(tensors, str(folder / ADAPTER_FILE), metadata={"format": "pt", "lmswitch_setting": json.dumps(_names(setting))})
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2), encoding="utf-8")
    return ExportReport(str(folder), r, full, round(kept, 6), _fidelity(lm, setting, A, B), target, _names(setting))


def _names(setting: Setting) -> dict[str, float]:
    return {switch.name: float(eps) for switch, eps in setting}
