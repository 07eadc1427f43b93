"""The GPT-3-XL-sized transformer layer used by the DVFS device scripts (torch imported by the caller).

d_model 2048, 16 heads, seq 2048, batch 4, bf16 autocast, forward + backward + AdamW. Phases are
labelled with record_function so the profile knows forward attention / forward MLP / backward /
optimizer. Read-only with respect to the GPU's settings: it only runs kernels.
"""

from __future__ import annotations

from typing import Any, Callable


def build_layer_step(torch: Any, *, d_model: int = 2048, heads: int = 16, seq: int = 2048, batch: int = 4,
                     device: str = "cuda", label: bool = True) -> tuple[Callable[[], None], dict[str, Any], Any]:
    """Returns (step, shape, modules) where ``modules`` = {"attn": ..., "mlp": ...} for hooks."""
    nn = torch.nn
    F = torch.nn.functional
    from torch.profiler import record_function
    from contextlib import nullcontext

    def rf(name: str):
        return record_function(name) if label else nullcontext()

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(d_model)
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.out = nn.Linear(d_model, d_model)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln(x)).split(d_model, dim=-1)
            q, k, v = (t.view(b, s, heads, d_model // heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return x + self.out(y.transpose(1, 2).reshape(b, s, d_model))

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(d_model)
            self.up = nn.Linear(d_model, 4 * d_model)
            self.down = nn.Linear(4 * d_model, d_model)

        def forward(self, x):
            return x + self.down(F.gelu(self.up(self.ln(x))))

    attn, mlp = Attention().to(device), Mlp().to(device)
    params = list(attn.parameters()) + list(mlp.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    x = torch.randn(batch, seq, d_model, device=device)
    dtype = torch.bfloat16

    def step() -> None:
        with torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=dtype):
            with rf("layer0.forward.attention"):
                h = attn(x)
            with rf("layer0.forward.mlp"):
                y = mlp(h)
                loss = y.float().pow(2).mean()
        with rf("layer0.backward"):
            loss.backward()
        with rf("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=False)

    shape = dict(model="gpt3-xl-layer", d_model=d_model, heads=heads, seq=seq, batch=batch, dtype="bf16-autocast",
                 optimizer="AdamW", layers=1, torch=torch.__version__)
    return step, shape, {"attn": attn, "mlp": mlp}
