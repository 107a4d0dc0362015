"""Load benchmark (issue 17): N clients at once against a launched app, over the OpenAI endpoint and Gradio's API.

    python benchmarks/load.py [--clients 1,4,8] [--seconds 30] [--tokens 20] [--via openai,gradio] [--busy] [--guided]
                              [--quantum 0.1,inf] [--rounds 3]
    python benchmarks/load.py --soak          # one hour, 4 clients: errors and memory growth after warm-up

Starts ``app.py`` on a free port (embedded model, shipped switches), then for each
way in (``openai``: streamed ``/v1/completions``; ``gradio``: the named ``/generate``
endpoint through ``gradio_client``) and each client count runs that many clients
for a fixed time. Each client sends 20-token generations with a switch and ε of its
own and a fresh seed per request (so no cache answers). With ``--busy``, two more
clients work beside them the whole time: one trains a switch from 30 + 30 sentences
over and over (``/train``), one alternates sweeps and highlights (``/sweep``,
``/highlight``). With ``--guided``, one more client sends guided generations (``/generate`` with 4 candidates, 40
tokens, the sentiment switch at +4) the whole time. Reported per row: requests completed, throughput, first-token and
last-token latency percentiles (``/generate`` answers whole, so its first token is
its last), errors, the background work done, and whether every result equals the
same request run alone (every request is replayed alone afterwards, one at a
time). ``--quantum`` lists the compute thread's pause quanta to compare, one server
each (``inf``: background work never lets generations go first, as before issue 17's
fair scheduling). ``--rounds R`` splits each row into R turns and runs the client counts in turn (1, 4, 1, 4, …), so
the machine's speed drifting between rows, as it does on shared cores, does not flatter one count. Prints a Markdown block for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path

import openai
from gradio_client import Client

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from app_server import AppServer  # noqa: E402  (the tests' launcher: app.py on a free port, a private switch folder)

from lmswitch.core.options import SAMPLING  # noqa: E402
from lmswitch.harness.report import machine  # noqa: E402

PROMPTS = ["My weekend was", "The new library on the corner", "I think that the mayor", "Yesterday at the market",
           "The service at the hotel", "Our team meeting went"]
SETTINGS = [{"sentiment": 6}, {"sentiment": -6}, {"formality": 2}, {"detox": 4}, {}, {"sentiment": 3, "formality": -2}]


def gradio_client(url: str) -> Client:
    """A ``gradio_client`` for the app on this machine. ``ssl_verify=False``: the URL is plain HTTP, so nothing is
    verified either way, but with verification on, ``gradio_client`` builds a fresh certificate store for each of the
    two HTTP connections of every call (~40 ms of CPU per ``/generate`` call, measured), and on these 2 cores the load
    generator's own work would be measured as the server's. ``download_files=False``: the files it returns (a trained
    switch) stay on the server, not copied into ``/tmp/gradio`` (gradio_client's default, fixed at its import)."""
    return Client(url, verbose=False, ssl_verify=False, download_files=False)


def one_request(client: openai.OpenAI, k: int, tokens: int) -> dict:
    """A streamed completion (with the app's default sampling, as ``/generate`` uses); returns its timing and text."""
    start = time.perf_counter()
    first, text = None, ""
    stream = client.completions.create(model="smollm2-135m", prompt=PROMPTS[k % len(PROMPTS)], max_tokens=tokens, seed=k, stream=True,
                                       temperature=SAMPLING.temperature, top_p=SAMPLING.top_p,
                                       extra_body={"switches": SETTINGS[k % len(SETTINGS)]})
    for chunk in stream:
        if first is None and chunk.choices[0].text:
            first = time.perf_counter() - start
        text += chunk.choices[0].text
    return {"k": k, "first": first or time.perf_counter() - start, "last": time.perf_counter() - start, "text": text}


def one_gradio_request(client: Client, k: int, tokens: int) -> dict:
    """One ``/generate`` call (answered whole); returns its timing and steered text."""
    setting = ", ".join(f"{name}={eps}" for name, eps in SETTINGS[k % len(SETTINGS)].items())
    start = time.perf_counter()
    out = client.predict(prompt=PROMPTS[k % len(PROMPTS)], switches=setting, max_new_tokens=tokens, seed=k, api_name="/generate")
    last = time.perf_counter() - start
    return {"k": k, "first": last, "last": last, "text": out["steered"]}


class Way:
    """How clients reach the app: a fresh client per thread and the request function. A request's solo replay always
    goes through the OpenAI endpoint: ``/generate`` would answer a replay from the server's comparison cache (shared
    by content), and a completion with the same prompt, switches, seed and sampling is the same decode."""

    def __init__(self, name: str, url: str) -> None:
        self.name, self.url = name, url
        self.solo_client = openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0, timeout=120)

    def solo(self, k: int, tokens: int) -> str:
        return one_request(self.solo_client, k, tokens)["text"]

    def client(self):
        if self.name == "openai":
            return openai.OpenAI(base_url=f"{self.url}/v1", api_key="-", max_retries=0, timeout=120)
        return gradio_client(self.url)

    def request(self, client, k: int, tokens: int) -> dict:
        return (one_request if self.name == "openai" else one_gradio_request)(client, k, tokens)


def _loop(deadline: float, work, errors: list[str], lock: threading.Lock) -> None:
    while time.perf_counter() < deadline:
        try:
            work()
        except Exception as err:  # counted and shown, never hidden
            with lock:
                errors.append(f"{type(err).__name__}: {err}"[:200])


def _background(url: str, deadline: float, lock: threading.Lock, done: dict) -> list[threading.Thread]:
    """The --busy clients: one trains switches from 30 + 30 sentences over and over, one alternates sweeps and highlights."""
    examples = ROOT / "lmswitch" / "data" / "examples"
    pos, neg = ((examples / f"sentiment_{side}.txt").read_text().splitlines()[:30] for side in ("positive", "negative"))

    def train() -> None:
        client = gradio_client(url)  # a new client per training, closed after it: a new session each time, as scripts do
        try:
            client.predict(mode="labelled sentences", name="busy", text_a="\n".join(pos), text_b="\n".join(neg), file_a=None, file_b=None,
                           api_name="/train")
        finally:
            client.close()
        done["trainings"] += 1

    lens = gradio_client(url)

    def sweep_or_highlight() -> None:
        if done["lens"] % 2 == 0:
            lens.predict(name="sentiment", eps_text="-6, 0, 6", samples=1, prompt=PROMPTS[0], max_new_tokens=20, api_name="/sweep")
        else:
            lens.predict(text="You are a complete idiot and your ideas are garbage.", file=None, name="detox", eps=-4, api_name="/highlight")
        done["lens"] += 1

    return [threading.Thread(target=_loop, args=(deadline, work, done["background_errors"], lock)) for work in (train, sweep_or_highlight)]


def _guided(url: str, deadline: float, lock: threading.Lock, done: dict) -> threading.Thread:
    """The --guided client: guided generations (4 candidates, 40 tokens) one after another, a fresh seed each."""
    client = gradio_client(url)

    def guided() -> None:
        client.predict(prompt=PROMPTS[1], switches="sentiment=4", max_new_tokens=40, seed=done["guided"], guide=4, api_name="/generate")
        done["guided"] += 1

    return threading.Thread(target=_loop, args=(deadline, guided, done["guided_errors"], lock))


def _memory(server: AppServer, seconds: float, done: dict) -> threading.Thread:
    """Reads the server's resident memory after the warm-up (a quarter of the run, at most five minutes) and at the end."""
    def watch() -> None:
        try:
            time.sleep(min(seconds / 4, 300))
            done["rss_warm"] = server.rss_bytes()
            time.sleep(max(seconds - min(seconds / 4, 300) - 1, 0))
            done["rss_end"] = server.rss_bytes()
        except Exception as err:  # the server is gone: the rows say so instead of losing the run
            done["rss_error"] = f"{type(err).__name__}: {err}"

    return threading.Thread(target=watch)


def run_clients(way: Way, server: AppServer, clients: int, seconds: float, tokens: int, start_k: int,
                busy: bool, guided: bool = False) -> tuple[list[dict], list[str], dict]:
    results: list[dict] = []
    errors: list[str] = []
    done = {"trainings": 0, "lens": 0, "guided": 0, "background_errors": [], "guided_errors": []}
    lock = threading.Lock()
    counter = iter(range(start_k, start_k + 1_000_000))
    deadline = time.perf_counter() + seconds

    def client_loop() -> None:
        client = way.client()

        def work() -> None:
            with lock:
                k = next(counter)
            r = way.request(client, k, tokens)
            with lock:
                results.append(r)

        _loop(deadline, work, errors, lock)

    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    threads += _background(way.url, deadline, lock, done) if busy else []
    threads += [_guided(way.url, deadline, lock, done)] if guided else []
    threads.append(_memory(server, seconds, done))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors, done


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def measure(way: Way, server: AppServer, counts: list[int], args: argparse.Namespace, quantum: str) -> list[tuple]:
    client = way.client()
    for k in range(len(PROMPTS)):  # warm-up: every prompt once, and past the ~3 s of work the app reads ahead as it starts
        way.request(client, 10**9 + k, args.tokens)
    pooled = {n: ([], [], {}) for n in counts}
    for turn in range(args.rounds):  # the counts take turns, so a drift in the machine's speed reaches each of them alike
        for i, n in enumerate(counts):
            results, errors, done = run_clients(way, server, n, args.seconds / args.rounds, args.tokens,
                                                (turn * len(counts) + i) * 100_000, args.busy, args.guided)
            _pool(pooled[n], results, errors, done)
    rows = []
    for n, (results, errors, done) in pooled.items():
        same = None if args.soak else sum(way.solo(r["k"], args.tokens) == r["text"] for r in results)
        firsts, lasts = [r["first"] for r in results], [r["last"] for r in results]
        rows.append((quantum, way.name, n, len(results), len(results) / args.seconds, pct(firsts, 50), pct(firsts, 95), pct(lasts, 50),
                     pct(lasts, 95), len(errors), same, done, errors[:3]))
    return rows


def _pool(into: tuple[list, list, dict], results: list[dict], errors: list[str], done: dict) -> None:
    """One turn of a row added to the row: its requests, errors and the work beside; memory from the first turn's
    warm-up to the last turn's end."""
    into[0].extend(results)
    into[1].extend(errors)
    pooled = into[2]
    for key, value in done.items():
        if key in ("rss_end", "rss_error") or key not in pooled:
            pooled[key] = value
        elif key != "rss_warm":  # counts and lists of errors add up
            pooled[key] += value


def memory(done: dict) -> str:
    if "rss_end" not in done:
        return f"not read ({done.get('rss_error', 'the run ended first')})"
    return f"{done['rss_end'] / done['rss_warm'] - 1:+.1%} ({done['rss_end'] / 2**20:.0f} MB)"


def report(rows: list[tuple], args: argparse.Namespace) -> None:
    busy = " while one more client trains switches and one runs sweeps and highlights" if args.busy else ""
    busy += (" and" if busy else " while") + " one more client sends guided generations" if args.guided else ""
    print(f"## {date.today()} — load (issue 17): {args.tokens}-token generations{busy}, {args.seconds:g} s per row"
          f"{f' in {args.rounds} turns, the client counts taking turns' if args.rounds > 1 else ''} — "
          f"{machine()}, embedded "
          f"SmolLM2-135M-Instruct in {args.dtype}\n")
    print("| quantum | via | clients | requests | req/s | first token p50 | p95 | last token p50 | p95 | errors | equal to solo | "
          "memory after warm-up |" + (" trainings / sweeps+highlights beside |" if args.busy else "")
          + (" guided generations beside |" if args.guided else ""))
    print("|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if args.busy else "") + ("---|" if args.guided else ""))
    base = {}
    for quantum, via, n, count, rate, f50, f95, l50, l95, errs, same, done, shown in rows:
        base.setdefault((quantum, via), rate or 1)
        extra = f" {done['trainings']} / {done['lens']} ({len(done['background_errors'])} errors) |" if args.busy else ""
        extra += f" {done['guided']} ({len(done['guided_errors'])} errors) |" if args.guided else ""
        print(f"| {quantum} | {via} | {n} | {count} | {rate:.2f} ({rate / base[quantum, via]:.1f}×) | {f50:.2f} s | {f95:.2f} s | {l50:.2f} s | {l95:.2f} s | "
              f"{errs} | {'not replayed' if same is None else f'{same}/{count}'} | {memory(done)} |{extra}")
        for e in shown:
            print(f"\n  error: {e}")
        for e in done["background_errors"][:3] + done["guided_errors"][:3]:
            print(f"\n  error beside (training, sweep, highlight or guided): {e}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", help="client counts, comma-separated (default 1,4,8; --soak: 4)")
    p.add_argument("--seconds", type=float, help="seconds per row (default 30; --soak: 3600)")
    p.add_argument("--rounds", type=int, default=1, help="split each row into this many turns, the client counts taking "
                   "turns (1,4,1,4,…), so a drift in the machine's speed between rows reaches every count alike")
    p.add_argument("--tokens", type=int, default=20)
    p.add_argument("--via", help="openai, gradio or both, comma-separated (default both; --soak: openai)")
    p.add_argument("--busy", action="store_true", help="a training client and a sweep/highlight client work beside the clients")
    p.add_argument("--guided", action="store_true", help="a client sending guided generations (4 candidates) works beside the clients")
    p.add_argument("--soak", action="store_true", help="the soak test: 4 clients over the OpenAI endpoint for an hour (unless "
                   "--clients/--seconds/--via say otherwise), requests not replayed alone; reports errors and memory growth")
    p.add_argument("--quantum", default="0.1", help="compute-thread pause quanta to compare, in seconds (inf: no pausing)")
    p.add_argument("--dtype", default="float32", help="the app's model dtype (float32: results comparable bit for bit with solo runs)")
    args = p.parse_args()
    for key, usual, soak in (("clients", "1,4,8", "4"), ("seconds", 30.0, 3600.0), ("via", "openai,gradio", "openai")):
        if getattr(args, key) is None:  # not given: the soak's or the usual value
            setattr(args, key, soak if args.soak else usual)
    ways = [w.strip() for w in args.via.split(",")]
    if not ways or set(ways) - {"openai", "gradio"}:
        p.error(f"--via takes openai, gradio or both; got {args.via!r}")
    counts = [int(x) for x in args.clients.split(",")]
    if args.rounds < 1:
        p.error(f"--rounds takes a whole number ≥ 1; got {args.rounds}")
    rows = []
    # this process's temporary files in one folder removed at the end: the app's switch folder, and the empty folder
    # gradio_client leaves behind for every file it downloads (Client._download_file)
    with tempfile.TemporaryDirectory(prefix="lmswitch-load-") as scratch:
        tempfile.tempdir = scratch
        try:
            for quantum in (q.strip() for q in args.quantum.split(",")):
                server = AppServer(Path(tempfile.mkdtemp()), name="load", args=("--dtype", args.dtype),
                                   env={"LMSWITCH_PAUSE_QUANTUM": quantum})
                try:
                    server.wait_ready()
                    rows += [row for name in ways for row in measure(Way(name, server.url), server, counts, args, quantum)]
                finally:
                    server.stop()
        finally:
            tempfile.tempdir = None
    report(rows, args)


if __name__ == "__main__":
    main()
