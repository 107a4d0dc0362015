"""Load benchmark (issue 17): N clients at once against a launched app's OpenAI-compatible endpoint.

    python benchmarks/load.py [--clients 1,4,8] [--seconds 30] [--tokens 20]

Starts ``app.py`` on a free port (embedded model, shipped switches), then for each
client count runs that many clients for a fixed time. Each client sends streamed
20-token completions with a switch and ε of its own and a fresh seed per request
(so no cache answers). Reported per client count: requests completed, throughput,
first-token and last-token latency percentiles, errors, and whether every result
equals the same request run alone (every request is replayed alone afterwards,
one at a time). Prints a Markdown block for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path

import openai
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from app_server import AppServer  # noqa: E402  (the tests' launcher: app.py on a free port, a private switch folder)

PROMPTS = ["My weekend was", "The new library on the corner", "I think that the mayor", "Yesterday at the market",
           "The service at the hotel", "Our team meeting went"]
SETTINGS = [{"sentiment": 6}, {"sentiment": -6}, {"formality": 2}, {"detox": 4}, {}, {"sentiment": 3, "formality": -2}]


def one_request(client: openai.OpenAI, k: int, tokens: int) -> dict:
    """A streamed completion; returns its timing and text."""
    body = {"prompt": PROMPTS[k % len(PROMPTS)], "max_tokens": tokens, "seed": k, "switches": SETTINGS[k % len(SETTINGS)]}
    start = time.perf_counter()
    first, text = None, ""
    stream = client.completions.create(model="smollm2-135m", prompt=body["prompt"], max_tokens=tokens, seed=k, stream=True,
                                       extra_body={"switches": body["switches"]})
    for chunk in stream:
        if first is None and chunk.choices[0].text:
            first = time.perf_counter() - start
        text += chunk.choices[0].text
    return {"k": k, "first": first or time.perf_counter() - start, "last": time.perf_counter() - start, "text": text}


def run_clients(url: str, clients: int, seconds: float, tokens: int, start_k: int) -> tuple[list[dict], list[str]]:
    results: list[dict] = []
    errors: list[str] = []
    lock = threading.Lock()
    counter = iter(range(start_k, start_k + 1_000_000))
    deadline = time.perf_counter() + seconds

    def client_loop() -> None:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0, timeout=120)
        while time.perf_counter() < deadline:
            with lock:
                k = next(counter)
            try:
                r = one_request(client, k, tokens)
                with lock:
                    results.append(r)
            except Exception as err:  # counted and shown, never hidden
                with lock:
                    errors.append(f"{type(err).__name__}: {err}"[:200])

    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", default="1,4,8")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--tokens", type=int, default=20)
    p.add_argument("--dtype", default="float32", help="the app's model dtype (float32: results comparable bit for bit with solo runs)")
    args = p.parse_args()
    server = AppServer(Path(tempfile.mkdtemp()), name="load", args=("--dtype", args.dtype))
    try:
        server.wait_ready()
        solo_client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="-", max_retries=0, timeout=120)
        one_request(solo_client, 10**9, args.tokens)  # warm-up
        rows, start_k = [], 0
        for n in (int(x) for x in args.clients.split(",")):
            results, errors = run_clients(server.url, n, args.seconds, args.tokens, start_k)
            start_k += 100_000
            same = sum(one_request(solo_client, r["k"], args.tokens)["text"] == r["text"] for r in results)
            firsts, lasts = [r["first"] for r in results], [r["last"] for r in results]
            rows.append((n, len(results), len(results) / args.seconds, pct(firsts, 50), pct(firsts, 95), pct(lasts, 50), pct(lasts, 95),
                         len(errors), same, errors[:3]))
    finally:
        server.stop()
    print(f"## {date.today()} — load (issue 17): OpenAI endpoint, {args.tokens}-token streamed completions, {args.seconds:g} s per "
          f"client count — {platform.machine()} {platform.processor() or ''}, {torch.get_num_threads()} threads, torch "
          f"{torch.__version__}, embedded SmolLM2-135M-Instruct in {args.dtype}\n")
    print("| clients | requests | req/s | first token p50 | p95 | last token p50 | p95 | errors | equal to solo |")
    print("|---|---|---|---|---|---|---|---|---|")
    base = rows[0][2] if rows else 0
    for n, count, rate, f50, f95, l50, l95, errs, same, shown in rows:
        print(f"| {n} | {count} | {rate:.2f} ({rate / base:.1f}×) | {f50:.2f} s | {f95:.2f} s | {l50:.2f} s | {l95:.2f} s | {errs} | "
              f"{same}/{count} |")
        for e in shown:
            print(f"\n  error: {e}")


if __name__ == "__main__":
    main()
