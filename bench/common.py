"""Shared helpers of the latency and ingest benchmarks: deterministic realistic texts,
queries, fresh engines, percentiles and the machine description.

The texts read like what a person tells an assistant over months — work notes, decisions,
incidents, plans, family, travel, food, health, money — built from templates whose slots
are filled from fixed vocabularies by a seeded ``random.Random``, so every run (and every
machine) gets the same corpus.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from engrain import Engine, Kind, Memory, Settings
from engrain.model import content_hash, new_id

#: The moment the synthetic history ends; memories are spread over the two years before.
NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)

PEOPLE = (
    "Priya", "Marcus", "Lena", "Tomás", "Aisha", "Kenji", "Sofia", "Daniel", "Mei", "Omar",
    "Grace", "Ravi", "Elena", "Jonas", "Fatima", "Noah", "Ingrid", "Mateo", "Chloe", "Yusuf",
    "Hannah", "Diego", "Anya", "Samuel", "Leila", "Viktor", "Nadia", "Oliver", "Zara", "Felix",
)  # fmt: skip
FAMILY = (
    "my sister", "my brother", "my mother", "my dad", "my partner", "my cousin", "my aunt",
    "my grandfather", "my best friend", "my neighbour",
)  # fmt: skip
PLACES = (
    "Lisbon", "Kyoto", "Denver", "Berlin", "Oaxaca", "Edinburgh", "Cape Town", "Montreal",
    "Seoul", "Porto", "Vancouver", "Istanbul", "Melbourne", "Copenhagen", "Marrakesh",
    "Valencia", "Hanoi", "Reykjavik", "Austin", "Ljubljana",
)  # fmt: skip
SYSTEMS = (
    "billing service", "payments API", "search index", "onboarding flow", "mobile app",
    "data pipeline", "auth service", "notification worker", "reporting dashboard",
    "Postgres cluster", "invoice renderer", "public API gateway", "feature-flag service",
    "export job", "webhook dispatcher", "admin console", "ML ranking model", "CI pipeline",
)  # fmt: skip
TOOLS = (
    "Kubernetes", "Terraform", "Redis", "Kafka", "FastAPI", "Django", "React", "Grafana",
    "Sentry", "Celery", "Dramatiq", "RabbitMQ", "ClickHouse", "Elasticsearch", "GitHub Actions",
    "Datadog", "PgBouncer", "Airflow", "dbt", "Snowflake", "Nginx", "Envoy",
)  # fmt: skip
CAUSES = (
    "a missing index on the events table", "an expired TLS certificate",
    "connection pool exhaustion under load", "a race between two retries",
    "a timezone bug around daylight saving", "an unbounded query in the nightly job",
    "a misconfigured health check", "a memory leak in the image resizer",
    "stale cache entries after a deploy", "a schema migration that locked the table",
    "DNS resolution timeouts", "a silent change in a vendor API",
)  # fmt: skip
REASONS = (
    "it halves our hosting bill", "the team already knows it",
    "retries are easier to reason about", "the old setup paged us every weekend",
    "it keeps tenants isolated", "latency matters more than throughput here",
    "the vendor is sunsetting the old plan", "it removes a whole class of duplicate events",
    "customers asked for it twice this quarter", "it makes local development much simpler",
)  # fmt: skip
FOODS = (
    "ramen", "mole negro", "grilled sardines", "mushroom risotto", "lamb tagine", "pho",
    "sourdough pizza", "bibimbap", "pasteis de nata", "shakshuka", "paella", "dumplings",
    "green curry", "smoked trout", "falafel", "tiramisu",
)  # fmt: skip
HOBBIES = (
    "bouldering", "sourdough baking", "trail running", "watercolour painting", "playing the cello",
    "chess", "film photography", "birdwatching", "woodworking", "learning Japanese",
    "open-water swimming", "gardening",
)  # fmt: skip
BOOKS = (
    "Designing Data-Intensive Applications", "The Overstory", "Project Hail Mary",
    "Thinking in Systems", "The Left Hand of Darkness", "A Philosophy of Software Design",
    "Piranesi", "The Manager's Path", "Station Eleven", "Braiding Sweetgrass",
)  # fmt: skip
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
PREF_PAIRS = (
    ("tabs", "spaces"), ("short answers", "long explanations"), ("tea", "coffee"),
    ("morning meetings", "late calls"), ("Python", "Go"), ("window seats", "aisle seats"),
    ("trains", "short flights"), ("written design docs", "slide decks"),
    ("dark mode", "light themes"), ("plain SQL", "an ORM"), ("pytest fixtures", "setUp methods"),
    ("metric units", "imperial units"), ("vegetarian dishes", "heavy meat dishes"),
    ("async standups", "daily calls"), ("small pull requests", "big-bang merges"),
)  # fmt: skip

#: Sentence templates by category. Slots: {p} person, {f} family, {pl} place, {s} system,
#: {t}/{t2} tools, {c} cause, {r} reason, {food}, {hobby}, {book}, {mo} month, {wd} weekday,
#: {n}/{m}/{k} numbers, {pa}/{pb} a preference pair.
TEMPLATES: dict[str, Sequence[str]] = {
    "event": (
        "{p} and I spent {wd} afternoon debugging the {s}; the root cause was {c}.",
        "On {wd} the {s} went down for {n} minutes because of {c}, and {p} wrote the postmortem.",
        "We shipped the new {s} to {k} percent of customers on {wd}, and error rates stayed flat.",
        "Last {wd} I ran {n} kilometres along the river in {m} minutes, my best time since {mo}.",
        "{F} called on {wd} to say they are moving to {pl} in {mo} for a new job.",
        "Had dinner with {p} at a small place in {pl}; the {food} was the best I had in years.",
        "Spent the weekend {hobby} with {p}, and we booked a longer trip to {pl} for {mo}.",
        "The load test on the {s} reached {n} requests per second before {c} showed up.",
        "{p} gave notice on {wd}; their last day is {mo} {d}, and I will inherit the {s}.",
        "Flew back from {pl} on {wd}; the flight was delayed {m} minutes and I missed the standup.",
    ),
    "decision": (
        "We decided to move the {s} from {t} to {t2} before the {mo} release, mainly because {r}.",
        "After a long review with {p}, we chose {t} for the {s} since {r}.",
        "We agreed to freeze changes to the {s} during the last week of {mo}, because {r}.",
        "{p} and I decided to split the {s} into two deployables, since {r}.",
        "The team voted to drop {t} from the {s} by {mo}; {p} owns the migration plan.",
    ),
    "fact": (
        "The {s} runs on {t} with {n} replicas and handles about {k} thousand requests a day.",
        "{p} is the tech lead for the {s} and prefers to review pull requests in the afternoon.",
        "{F} lives in {pl} and works as a nurse on night shifts.",
        "Our {t} bill was {n} dollars last month, {k} percent more than in {mo}.",
        "The on-call rotation for the {s} changes every {wd}, and {p} keeps the schedule.",
        "I have been {hobby} for {k} years and go every {wd} evening.",
        "{p} recommended the book {book}, which is about how systems fail in practice.",
        "The {s} keeps {n} days of logs in {t}; older logs move to cold storage.",
        "My rent in {pl} went up to {m}0 euros a month from {mo}.",
        "{F} is allergic to peanuts, so I always check menus before we book a restaurant.",
    ),
    "preference": (
        "I prefer {pa} over {pb}, especially when the week is busy.",
        "I really prefer {pa} to {pb}; please keep that in mind for suggestions.",
        "I always choose {pa} when I can, and I dislike {pb}.",
    ),
    "plan": (
        "Next {mo} I want to finish the {s} rewrite and hand the {t} upgrade to {p}.",
        "I am planning a trip to {pl} in {mo} with {f}, maybe {d} days in total.",
        "Goal for this quarter: cut p95 latency of the {s} from {n} ms to under {m} ms.",
        "I need to renew my passport before {mo}; the appointment is on a {wd}.",
        "{p} and I plan to run a workshop on {t} for the new hires in {mo}.",
    ),
    "health": (
        "My physiotherapist said to rest my knee for {k} weeks after the {hobby} injury.",
        "I have been sleeping about {k} hours a night since the {s} incident; need to fix that.",
        "Started a new routine: {n} push-ups every morning and a walk after lunch.",
        "The dentist appointment moved to {wd} {mo} {d} at {k} in the afternoon.",
    ),
    "pattern": (
        "Whenever the {s} misbehaves, I first check {t} dashboards and then the recent deploys.",
        "For every change to the {s} we write the migration first and deploy it a release earlier.",
        "Jobs in the {s} are idempotent: they check their own state and exit early when done.",
        "Code reviews on the {s} need one approval from {p} or someone on the platform team.",
    ),
}

#: How often each category appears, and the kind a memory of that category gets.
CATEGORY_WEIGHTS = {
    "event": 30, "fact": 24, "decision": 10, "plan": 12, "health": 8, "pattern": 8,
    "preference": 3,
}  # fmt: skip
CATEGORY_KIND = {
    "event": Kind.EVENT, "fact": Kind.FACT, "decision": Kind.DECISION, "plan": Kind.CONTEXT,
    "health": Kind.FACT, "pattern": Kind.PATTERN, "preference": Kind.PREFERENCE,
}  # fmt: skip

QUESTIONS = (
    "What was the root cause when the {s} went down?",
    "Why did we move the {s} to {t}?",
    "Who owns the {s} now?",
    "What did {p} say about the {s} postmortem?",
    "When is {f} moving to {pl}?",
    "Where did I have that great {food}?",
    "What do I usually do on {wd} evenings?",
    "How fast was my last run along the river?",
    "Which book did {p} recommend?",
    "What did we decide about {t} for the {s}?",
    "How many replicas does the {s} run with?",
    "What is my plan for the trip to {pl}?",
    "What was our {t} bill last month?",
    "Help me write a status update about the {s} latency work.",
    "Draft a message to {p} about the {t} migration timeline.",
    "I keep seeing {c} in the {s}. Have we seen this before?",
    "Suggest a restaurant for dinner with {f} in {pl}.",
    "What are my preferences for {pa}?",
    "Remind me what the physiotherapist said about my knee.",
    "Can you plan my week around the {s} freeze in {mo}?",
)  # fmt: skip


def _fill(template: str, rng: random.Random) -> str:
    pa, pb = rng.choice(PREF_PAIRS)
    t, t2 = rng.sample(TOOLS, 2)
    family = rng.choice(FAMILY)
    slots = {
        "p": rng.choice(PEOPLE), "f": family, "F": family.capitalize(), "pl": rng.choice(PLACES),
        "s": rng.choice(SYSTEMS), "t": t, "t2": t2, "c": rng.choice(CAUSES),
        "r": rng.choice(REASONS), "food": rng.choice(FOODS), "hobby": rng.choice(HOBBIES),
        "book": rng.choice(BOOKS), "mo": rng.choice(MONTHS), "wd": rng.choice(WEEKDAYS),
        "n": rng.randint(2, 900), "m": rng.randint(20, 240), "k": rng.randint(2, 60),
        "d": rng.randint(1, 28), "pa": pa, "pb": pb,
    }  # fmt: skip
    return template.format(**slots)


@dataclass(frozen=True)
class Note:
    """One synthetic memory text and the category it was drawn from."""

    text: str
    category: str


def make_notes(n: int, seed: int = 7, min_words: int = 20, max_words: int = 80) -> list[Note]:
    """``n`` deterministic single-paragraph notes of ``min_words``–``max_words`` words: a
    first sentence of one category, then more sentences (mostly the same category) until
    a target length drawn uniformly from the range."""
    rng = random.Random(seed)
    categories = list(CATEGORY_WEIGHTS)
    weights = list(CATEGORY_WEIGHTS.values())
    notes: list[Note] = []
    while len(notes) < n:
        category = rng.choices(categories, weights)[0]
        target = rng.randint(min_words, max_words)
        sentences = [_fill(rng.choice(TEMPLATES[category]), rng)]
        words = len(sentences[0].split())
        while words < target:
            pool = (
                category
                if rng.random() < 0.6 and category != "preference"
                else rng.choice([c for c in categories if c != "preference"])
            )
            sentence = _fill(rng.choice(TEMPLATES[pool]), rng)
            if words + len(sentence.split()) > max_words:
                if words >= min_words:
                    break
                continue
            sentences.append(sentence)
            words += len(sentence.split())
        notes.append(Note(" ".join(sentences), category))
    return notes


def make_documents(n: int, seed: int = 11, multi_share: float = 0.3) -> list[str]:
    """``n`` ingest inputs: mostly single-paragraph notes, and ``multi_share`` of them
    multi-paragraph texts (3–8 paragraphs, like a meeting write-up or a journal entry)."""
    rng = random.Random(seed)
    pool = iter(make_notes(n * 6, seed=seed + 1))
    docs: list[str] = []
    for _ in range(n):
        if rng.random() < multi_share:
            docs.append("\n\n".join(next(pool).text for _ in range(rng.randint(3, 8))))
        else:
            docs.append(next(pool).text)
    return docs


def make_queries(n: int, seed: int = 13) -> list[str]:
    """``n`` distinct questions and requests about the same vocabulary as the notes."""
    rng = random.Random(seed)
    seen: dict[str, None] = {}
    while len(seen) < n:
        seen.setdefault(_fill(rng.choice(QUESTIONS), rng), None)
    return list(seen)


def make_memories(
    notes: Sequence[Note], vectors: Any, user_id: str, seed: int = 17
) -> list[Memory]:
    """Memories for ``notes`` with precomputed ``vectors``, as the learning path would store
    them: kind from the category, created over the two years before :data:`NOW`, events
    with an event time, importance spread over [0.3, 1]. Preference keys are made unique
    (the engine would merge same-key preferences)."""
    from engrain.ingest.signals import preference_key

    rng = random.Random(seed)
    memories = []
    keys: set[str] = set()
    for note, vector in zip(notes, vectors, strict=True):
        kind = CATEGORY_KIND[note.category]
        mtype = kind.default_memory_type
        created = NOW - timedelta(minutes=rng.randint(60, 2 * 365 * 24 * 60))
        key = None
        if kind is Kind.PREFERENCE:
            base = key = preference_key(note.text)
            suffix = 2
            while key in keys:
                key, suffix = f"{base}-{suffix}", suffix + 1
            keys.add(key)
        memories.append(
            Memory(
                id=new_id(),
                user_id=user_id,
                content=note.text,
                memory_type=mtype,
                kind=kind,
                created_at=created,
                updated_at=created,
                event_at=created - timedelta(hours=rng.randint(0, 48))
                if kind is Kind.EVENT
                else None,
                key=key,
                importance=round(rng.uniform(0.3, 1.0), 3),
                confidence=kind.default_confidence,
                content_hash=content_hash(note.text),
                embedding=vector,
            )
        )
    return memories


def embed_corpus(
    embedder: Any, texts: Sequence[str], *, batch: int = 256, cache_dir: Path | None = None
) -> tuple[Any, float, bool]:
    """Vectors of ``texts`` with the real embedder, ``batch`` texts per call (progress on
    stderr); the seconds it took; and whether they came from ``cache_dir`` (vectors saved
    by an earlier run for exactly these texts and this model)."""
    import hashlib

    import numpy as np

    digest = hashlib.sha256(embedder.model_id.encode())
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    cached = cache_dir / f"vectors-{digest.hexdigest()[:24]}.npy" if cache_dir else None
    if cached is not None and cached.is_file():
        return np.load(cached), 0.0, True
    start = time.perf_counter()
    parts = []
    for offset in range(0, len(texts), batch):
        parts.append(embedder.embed(texts[offset : offset + batch]))
        done = min(offset + batch, len(texts))
        rate = done / (time.perf_counter() - start)
        print(f"\r  embedding {done:,}/{len(texts):,} ({rate:.0f} texts/s)", end="",
              file=sys.stderr, flush=True)  # fmt: skip
    print(file=sys.stderr)
    vectors = np.vstack(parts)
    seconds = time.perf_counter() - start
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        np.save(cached, vectors)
    return vectors, seconds, False


def open_engine(directory: Path, name: str = "engrain.db", **kwargs: Any) -> Engine:
    """An engine on a fresh SQLite file, with settings independent of the environment."""
    path = directory / name
    for leftover in directory.glob(name + "*"):
        leftover.unlink()
    return Engine(settings=Settings(url=f"sqlite:///{path}", data_dir=directory), **kwargs)


def warm_up(engine: Engine, user_id: str, queries: Sequence[str]) -> bool:
    """Answer ``queries`` untimed: the first, then wait for the store's vector index (when it
    builds one), then the rest; whether the index was ready."""
    engine.context(queries[0], user_id, now=NOW)
    wait = getattr(engine.store, "wait_for_index", None)
    indexed = bool(wait(user_id)) if wait is not None else False
    for query in queries[1:]:
        engine.context(query, user_id, now=NOW)
    return indexed


def latency_pool(warmup: int, queries: int, seed: int) -> tuple[list[str], list[str], list[str]]:
    """``bench/latency.py``'s queries at its ``--seed`` ``seed``: the ``warmup`` untimed ones,
    the ``queries`` timed ones, then as many again that it never asks (new questions)."""
    pool = make_queries(warmup + 2 * queries, seed=seed + 1)
    return pool[:warmup], pool[warmup : warmup + queries], pool[warmup + queries :]


def warm_model() -> Any:
    """The MiniLM model, its first run (which loads it) done before anything is timed."""
    from engrain.embed.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.embed(["warm the model up"])
    return embedder


def model_engine(db: Path, data_dir: Path, **changes: Any) -> Engine:
    """An engine on the SQLite store ``db`` with the warmed MiniLM model (:func:`warm_model`)
    and ``changes`` to its settings."""
    settings = Settings(url=f"sqlite:///{db}", data_dir=data_dir, **changes)
    return Engine(settings=settings, embedder=warm_model())


def copy_store(db: Path | str, copy: Path) -> Path:
    """``copy``, made a copy of the SQLite store ``db`` by SQLite's online backup: whole and
    consistent even while another process writes ``db``, which is only read. The shared
    model stores are copied so, never opened by an engine."""
    source, target = sqlite3.connect(db), sqlite3.connect(copy)
    try:
        source.backup(target, pages=65_536)
    finally:
        source.close()
        target.close()
    return copy


def run_child(
    script: str,
    mode: str,
    spec: dict[str, Any],
    paths: Sequence[Path | str] = (),
    *,
    same_hashes: bool = False,
) -> dict[str, Any]:
    """``python script --MODE SPEC`` in a new interpreter (cold caches, its own imports),
    ``spec`` passed as a temporary JSON file; the JSON object on its output's last line.
    ``paths`` go first on ``PYTHONPATH`` (a tree's ``src`` and ``bench``: the tree measured);
    ``same_hashes`` fixes ``PYTHONHASHSEED`` so set orders (BM25 sums) and so the blocks are
    alike in every run. Raises ``RuntimeError`` with the child's error output if it fails."""
    env = dict(os.environ)
    if paths:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), env.get("PYTHONPATH", "")])
        env["PYTHONPATH"] = env["PYTHONPATH"].rstrip(os.pathsep)
    if same_hashes:
        env["PYTHONHASHSEED"] = "0"
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(spec, handle)
    try:
        done = subprocess.run([sys.executable, script, f"--{mode}", handle.name],
                              capture_output=True, text=True, check=False, env=env)  # fmt: skip
    finally:
        Path(handle.name).unlink()
    if done.returncode != 0:
        where = f" on {paths[0]}" if paths else ""
        raise RuntimeError(f"{mode}{where} failed ({done.returncode}):\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) by linear interpolation, like numpy's default."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values_ms: Sequence[float]) -> dict[str, float]:
    """p50, p95, p99, mean, min and max of a list of milliseconds, rounded to 0.01."""
    return {
        "p50_ms": round(percentile(values_ms, 50), 2),
        "p95_ms": round(percentile(values_ms, 95), 2),
        "p99_ms": round(percentile(values_ms, 99), 2),
        "mean_ms": round(statistics.fmean(values_ms), 2),
        "min_ms": round(min(values_ms), 2),
        "max_ms": round(max(values_ms), 2),
    }


def cpu_summary(values_ms: Sequence[float]) -> dict[str, float]:
    """p50, mean and p95 of a list of milliseconds (a thread's CPU per call), rounded to
    0.001 (percentiles by linear interpolation, as numpy's)."""
    return {
        "p50": round(percentile(values_ms, 50), 3),
        "mean": round(statistics.fmean(values_ms), 3),
        "p95": round(percentile(values_ms, 95), 3),
    }


def status_mb(field: str = "VmRSS") -> float:
    """A memory line of this process's ``/proc/self/status`` in MB (Linux): ``VmRSS``, its
    resident memory now, or ``VmHWM``, its peak; NaN where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    return float("nan")


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on, including how busy the machine was."""
    import numpy
    import onnxruntime

    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "numpy": numpy.__version__,
        "onnxruntime": onnxruntime.__version__,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    with contextlib.suppress(OSError):
        info["load_average_1m"] = round(os.getloadavg()[0], 2)
    info["blas_threads_env"] = os.environ.get("OPENBLAS_NUM_THREADS")
    info["git"] = _git_state()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def _git_state() -> dict[str, Any] | None:
    """The commit measured and whether the working tree had uncommitted changes."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "src"],
            cwd=root, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"commit": commit, "src_dirty": bool(status.strip())}


def write_json(path: Path | None, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON to ``path`` (creating its directory), if given."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")


@contextmanager
def timing(
    targets: Sequence[tuple[Any, str, str]], spent: dict[str, float]
) -> Iterator[dict[str, float]]:
    """While active, each call of ``owner.attr`` for ``(owner, attr, stage)`` in ``targets``
    adds its milliseconds to ``spent[stage]``. Instance methods are shadowed by an instance
    attribute; module functions are replaced in the module. Everything is restored after."""
    restore: list[Callable[[], None]] = []

    def wrap(owner: Any, attr: str, stage: str) -> None:
        original = getattr(owner, attr)
        is_module = isinstance(owner, types.ModuleType)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[stage] = spent.get(stage, 0.0) + (time.perf_counter() - start) * 1000.0

        setattr(owner, attr, timed)
        if is_module:
            restore.append(lambda: setattr(owner, attr, original))
        else:
            restore.append(lambda: delattr(owner, attr))

    try:
        for owner, attr, stage in targets:
            wrap(owner, attr, stage)
        yield spent
    finally:
        for undo in reversed(restore):
            undo()
