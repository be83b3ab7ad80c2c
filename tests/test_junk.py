"""Junk at every public method: each call either succeeds or raises an ``EngrainError``
(never anything else), and a call that raises writes nothing.

Hypothesis draws calls whose arguments are each either a valid value or junk (wrong types,
empty or invisible text, lone surrogates, huge strings, out-of-range and non-finite numbers,
strings where times or integers belong, naive and out-of-range datetimes, bad turns and
import records). Before and after a refused call the whole store is compared: every user's
exported records and state documents. A smaller run checks that ``AsyncEngine`` answers
the same calls the same way. Explicit cases pin the exact inputs issue 11 lists.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engrain import AsyncEngine, Engine, EngrainError, Settings, Turn, ValidationError
from engrain.embed import HashEmbedder
from engrain.recall.gate import GateOptions

from .aio import run_async
from .conftest import NOW, make_settings

#: ``max_text_chars`` of the engines here: small, so "too long" inputs stay cheap.
LIMIT = 4_000

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # user ids with spaces warn


# -- a seeded engine ---------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """What the seeding wrote, for calls that need a real id, context or record."""

    mem0: str
    mem1: str
    context: str
    record: Mapping[str, Any]


@dataclass(frozen=True)
class Ref:
    """A placeholder for one of the :class:`World`'s values, resolved at call time."""

    name: str


@dataclass(frozen=True)
class Patched:
    """An exported memory record of the world under a new id, with ``changes`` applied."""

    changes: Mapping[str, Any]


def resolve(value: Any, world: World) -> Any:
    """``value`` with every :class:`Ref` and :class:`Patched` inside replaced."""
    if isinstance(value, Ref):
        return getattr(world, value.name)
    if isinstance(value, Patched):
        fresh = {**world.record, "id": "imported-1", "content": "Ada drinks oolong at noon"}
        return {**fresh, **{k: resolve(v, world) for k, v in value.changes.items()}}
    if isinstance(value, list):
        return [resolve(v, world) for v in value]
    if isinstance(value, tuple):
        return tuple(resolve(v, world) for v in value)
    if isinstance(value, dict):
        return {k: resolve(v, world) for k, v in value.items()}
    return value


def seed(engine: Engine) -> World:
    """Two users with a few memories and one context record."""
    tea = engine.remember("Ada prefers green tea over coffee in the morning", "ada",
                          kind="preference", now=NOW)  # fmt: skip
    k8s = engine.remember("The billing service runs on Kubernetes with three replicas", "ada",
                          now=NOW)  # fmt: skip
    engine.ingest_conversation(
        [{"speaker": "bob", "text": "I moved to Lisbon last spring with my sister"},
         {"speaker": "assistant", "text": "Lisbon is lovely in May, enjoy the tiles"}],
        "bob", session_id="s1", now=NOW,
    )  # fmt: skip
    ctx = engine.context("What does Ada drink in the morning?", "ada", now=NOW)
    record = next(r for r in engine.export_records("ada") if r.get("id") == tea.memory_id)
    engine.wait()
    assert tea.memory_id and k8s.memory_id
    return World(tea.memory_id, k8s.memory_id, ctx.id, dict(record))


def engine_settings(directory: Path) -> Settings:
    """In-memory store, hash embedder, a small text limit."""
    return make_settings(directory, url="memory://", max_text_chars=LIMIT)


def snapshot(engine: Engine, users: Iterable[str]) -> tuple[list[dict[str, Any]], list[Any]]:
    """Everything a call could have written: every exported record and, where the store can
    list them, the state documents of the store's users and of ``users``."""
    engine.wait()  # background work started by an earlier call is not this call's write
    records = list(engine.export_records())
    states: list[Any] = []
    read = getattr(engine.store, "states", None)
    if callable(read):
        for user in sorted({*engine.store.users(), *users}):
            states.append((user, sorted(read(user), key=repr)))
    return records, states


def users_in(args: Iterable[Any]) -> set[str]:
    """The plain strings among a call's arguments: any of them may be a user id written to."""
    found: set[str] = set()
    for arg in args:
        if isinstance(arg, str) and len(arg) < 300:
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                continue
            found.add(arg)
    return found


def invoke(engine: Engine, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call ``engine.method``; a lazy result (``export_records``) is consumed."""
    result = getattr(engine, method)(*args, **kwargs)
    return list(result) if method == "export_records" else result


def check(engine: Engine, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Make the call and hold it to the property; returns ``"ok"`` or the error's class."""
    before = snapshot(engine, users_in([*args, *kwargs.values()]))
    try:
        invoke(engine, method, args, kwargs)
    except EngrainError as exc:
        after = snapshot(engine, users_in([*args, *kwargs.values()]))
        assert after == before, f"{method} raised {exc!r} but changed the store"
        return type(exc).__name__
    except Exception as exc:
        raise AssertionError(
            f"{method}(*{args!r:.300}, **{kwargs!r:.300}) raised {type(exc).__name__} outside "
            f"the error tree: {exc!r:.300}"
        ) from exc
    return "ok"


# -- junk ---------------------------------------------------------------------------------------

NAIVE = datetime(2025, 6, 1, 9, 30)
AWARE = datetime(2025, 6, 1, 9, 30, tzinfo=timezone(timedelta(hours=-7)))
#: Accepted times, the extremes included (naive means UTC).
TIMES = st.sampled_from([
    NOW, NAIVE, AWARE, datetime(1, 1, 1, tzinfo=UTC), datetime.max.replace(tzinfo=UTC),
    datetime(1970, 1, 1), datetime.max,
]) | st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=13))]) | st.none(),
)  # fmt: skip

JUNK_SCALARS: list[Any] = [
    None, True, False, 0, 1, -1, -5, 7, 10**30, -(10**30), 1.5, -0.5, 0.0, -0.0,
    float("nan"), float("inf"), float("-inf"),
    "", " ", "   \t\n ", "\x00", "\x00" * 8, "\u200b", "\ufeff", "\u200b\ufeff\u2060",
    "\x01\x02\x1b\x7f", "\x85\x9f", "\ud800", "tea \udcff time", "1.5", "100", "-1", "0",
    "2024-01-01", "garbage", "None", "null", "no", "abc", b"bytes", b"\xff\xfe\x00",
    bytearray(b"x"), NAIVE, AWARE, datetime.min,
    datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))), date(2024, 1, 1),
    timedelta(days=1), [], {}, (), [None], ["a", 1], [["a"]], {"a": 1}, {"text": None},
    {1: "a"}, {"a": float("nan")}, {"a": object()}, {"a"}, object(), Turn("x", "y"),
    "x" * (LIMIT + 1), "\x00" * (LIMIT + 1), "tea " * (LIMIT // 4),
]  # fmt: skip

JUNK = st.one_of(
    st.sampled_from(JUNK_SCALARS),
    st.text(st.characters(codec=None, exclude_categories=()), max_size=12),
    st.integers(),
    st.floats(),
    st.binary(max_size=6),
    st.lists(st.sampled_from(JUNK_SCALARS[:50]), max_size=3),
    st.dictionaries(st.text(max_size=3), st.sampled_from(JUNK_SCALARS[:50]), max_size=2),
)


@dataclass(frozen=True)
class Arg:
    """One parameter: what a careful caller passes. Junk is drawn instead for at most two
    parameters of a call, so the other arguments carry the call past the first check."""

    valid: st.SearchStrategy[Any]

    @property
    def either(self) -> st.SearchStrategy[Any]:
        """Inside a list or record: usually valid, sometimes junk."""
        return st.sampled_from([False, False, False, True]).flatmap(
            lambda junk: JUNK if junk else self.valid
        )


def arg(*valid: st.SearchStrategy[Any]) -> Arg:
    """A parameter whose valid values come from ``valid``."""
    return Arg(st.one_of(*valid))


USER = arg(st.sampled_from(["ada", "bob", "carol", " ada "]))
TEXT = arg(st.sampled_from([
    "Ada moved the billing service to Postgres in March because it halves the bill.",
    "I prefer tabs over spaces, always.",
    "What does Ada drink in the morning?",
    "thanks!",
    "Deploys happen on Fridays\x00 after the \u200bstand-up.",
    "tea " * (LIMIT // 4 - 1),
]))  # fmt: skip
ID = arg(st.sampled_from(["s1", "p1", "work", "é", "e\u0301"]))
MEMORY_ID = arg(st.sampled_from([Ref("mem0"), Ref("mem1"), "no-such-id"]))
MEMORY_TYPE = arg(st.sampled_from(["semantic", "episodic", "procedural", "working", "bogus"]))
KIND = arg(st.sampled_from(["fact", "preference", "event", "decision", "correction", "x"]))
DOMAINS = arg(st.lists(st.sampled_from(["work", "health", "Travel"]), max_size=2), st.just("work"))
META = arg(st.just({"source": "test", "n": 1}), st.just({}))
UNIT = arg(st.floats(0, 1))
FLAG = arg(st.booleans())
TIME = arg(TIMES)
COUNT = arg(st.integers(1, 20), st.just(10**9))
BUDGET = arg(st.integers(0, 2000), st.just(10**9))
TYPES = arg(st.lists(st.sampled_from(["semantic", "episodic", "procedural"]), max_size=2))
TURN = arg(
    st.fixed_dictionaries(
        {"text": TEXT.either},
        optional={"speaker": arg(st.just("ada")).either, "turn_id": ID.either,
                  "dia_id": ID.either,
                  "at": arg(TIMES, st.just("2024-01-01T10:00"), st.just("2024-01-01")).either},
    ),
    st.builds(Turn, speaker=arg(st.just("bob")).either, text=TEXT.either, turn_id=ID.either,
              at=TIME.either),
)  # fmt: skip
TURNS = arg(st.lists(TURN.either, min_size=1, max_size=3))
RECORD_FIELDS = (
    "id", "user_id", "content", "memory_type", "kind", "created_at", "updated_at", "domains",
    "importance", "confidence", "usefulness", "access_count", "pinned", "muted", "compressed",
    "event_at", "key", "project", "session_id", "superseded_by", "provenance", "embedding",
    "embedding_model", "promoted_at", "last_accessed_at", "type",
)  # fmt: skip
RECORD = arg(
    st.builds(Patched, st.dictionaries(st.sampled_from(RECORD_FIELDS), JUNK, max_size=2)),
    st.fixed_dictionaries(
        {"type": st.just("conversation"), "user_id": USER.either, "turns": TURNS.either},
        optional={"session_id": ID.either, "project": ID.either, "domains": DOMAINS.either,
                  "memory_type": MEMORY_TYPE.either, "metadata": META.either},
    ),
    st.fixed_dictionaries(
        {"type": st.just("text"), "user_id": USER.either, "text": TEXT.either},
        optional={"session_id": ID.either, "memory_type": MEMORY_TYPE.either,
                  "domains": DOMAINS.either},
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["memories", "bogus", "state", ""])},
                          optional={"user_id": USER.either, "text": TEXT.either}),
)  # fmt: skip
SESSION = arg(
    st.fixed_dictionaries(
        {"turns": TURNS.either, "user_id": USER.either},
        optional={"session_id": ID.either, "project": ID.either, "domains": DOMAINS.either,
                  "memory_type_hint": MEMORY_TYPE.either, "metadata": META.either,
                  "now": TIME.either},
    ),
)  # fmt: skip
SESSIONS = arg(st.lists(SESSION.either, max_size=3))
GATE = {"token_budget": BUDGET, "memory_types": TYPES, "project": ID,
        "include_compressed": FLAG, "turn": arg(st.integers(0, 5), st.just(10**6)),
        "options": arg(st.just(GateOptions())), "now": TIME}  # fmt: skip


def noop(number: int) -> None:
    """A valid ``on_record`` callback."""


@st.composite
def _call(
    draw: st.DrawFn, positional: tuple[Arg, ...], optional: dict[str, Arg]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    given = [name for name in optional if draw(st.booleans())]
    slots = [*range(len(positional)), *given]
    junk = set(draw(st.lists(st.sampled_from(slots), max_size=2, unique=True))) if slots else set()

    def value(slot: int | str, param: Arg) -> Any:
        return draw(JUNK if slot in junk else param.valid)

    args = tuple(value(i, p) for i, p in enumerate(positional))
    return args, {name: value(name, optional[name]) for name in given}


def call(*positional: Arg, **optional: Arg) -> st.SearchStrategy[Any]:
    """``(args, kwargs)``: every positional argument, each keyword argument given or left to
    its default; up to two of them junk."""
    return _call(positional, optional)


ANY = Arg(JUNK)  # a parameter no value of which is valid

CALLS: dict[str, st.SearchStrategy[Any]] = {
    "ingest": call(
        TEXT,
        USER,
        session_id=ID,
        memory_type_hint=MEMORY_TYPE,
        project=ID,
        domains=DOMAINS,
        event_at=TIME,
        metadata=META,
        now=TIME,
    ),
    "ingest_conversation": call(
        TURNS,
        USER,
        session_id=ID,
        project=ID,
        domains=DOMAINS,
        memory_type_hint=MEMORY_TYPE,
        metadata=META,
        now=TIME,
    ),
    "ingest_conversations": call(SESSIONS),
    "remember": call(
        TEXT,
        USER,
        kind=KIND,
        memory_type=MEMORY_TYPE,
        project=ID,
        domains=DOMAINS,
        key=ID,
        confidence=UNIT,
        importance=UNIT,
        pinned=FLAG,
        muted=FLAG,
        access_count=COUNT,
        session_id=ID,
        event_at=TIME,
        corrects=MEMORY_ID,
        metadata=META,
        now=TIME,
    ),
    "recall": call(
        TEXT,
        USER,
        top_k=COUNT,
        token_budget=BUDGET,
        memory_types=TYPES,
        project=ID,
        include_compressed=FLAG,
        now=TIME,
    ),
    "context": call(
        TEXT,
        USER,
        top_k=COUNT,
        model=arg(st.sampled_from(["gpt-4o", "nope"])),
        context_window=arg(st.sampled_from([1, 8000, 60_000, 200_000, 10**12])),
        **GATE,
    ),
    "explain": call(TEXT, USER, **GATE),
    "get": call(MEMORY_ID, USER),
    "list": call(
        USER,
        project=ID,
        memory_type=MEMORY_TYPE,
        kind=KIND,
        session_id=ID,
        include_compressed=FLAG,
        limit=arg(st.integers(0, 50), st.none()),
        offset=arg(st.integers(0, 5), st.just(10**12)),
    ),
    "update": call(
        MEMORY_ID,
        USER,
        now=TIME,
        content=TEXT,
        kind=KIND,
        memory_type=MEMORY_TYPE,
        domains=DOMAINS,
        importance=UNIT,
        confidence=UNIT,
        usefulness=UNIT,
        pinned=FLAG,
        muted=FLAG,
        event_at=TIME,
        key=ID,
        project=ID,
        metadata=META,
        embedding=ANY,
        no_such_field=ANY,
    ),
    "pin": call(MEMORY_ID, USER, pinned=FLAG, now=TIME),
    "mute": call(MEMORY_ID, USER, muted=FLAG, now=TIME),
    "forget": call(arg(MEMORY_ID.valid, st.lists(MEMORY_ID.either, max_size=3)), USER),
    "import_records": call(
        arg(st.lists(RECORD.either, max_size=3)), now=TIME, on_record=arg(st.just(noop))
    ),
    "export_records": call(user_id=USER),
    "tiers": call(USER, project=ID, rebuild=FLAG, now=TIME),
    "compress": call(USER, force=FLAG, now=TIME),
    "feedback": call(
        USER,
        context_id=arg(st.sampled_from([Ref("context"), "no-such-context"])),
        memory_ids=arg(st.lists(MEMORY_ID.either, max_size=3)),
        helpful=FLAG,
        score=UNIT,
    ),
    "preview": call(
        TEXT,
        USER,
        token_budget=BUDGET,
        project=ID,
        model=arg(st.sampled_from(["gpt-4o", "nope"])),
        context_window=arg(st.sampled_from([1, 8000, 60_000, 10**12])),
        turn=arg(st.integers(0, 5), st.just(10**6)),
        now=TIME,
    ),
    "browse": call(
        USER,
        text=TEXT,
        memory_types=TYPES,
        kinds=arg(st.lists(KIND.valid, max_size=2)),
        domain=ID,
        project=ID,
        pinned=FLAG,
        muted=FLAG,
        superseded=FLAG,
        conflicting=FLAG,
        sort=arg(st.sampled_from(["updated", "used", "importance", "relevance", "x"])),
        limit=arg(st.integers(1, 50), st.none()),
        cursor=arg(st.none(), st.just("bm90LWEtY3Vyc29y")),
        projects=arg(st.lists(ID.valid, max_size=2)),
    ),
    "relations": call(MEMORY_ID, USER),
    "review": call(USER, project=ID, limit=arg(st.integers(1, 50), st.none())),
    "resolve": call(
        MEMORY_ID,
        MEMORY_ID,
        USER,
        arg(st.sampled_from(["keep", "correct", "both", "neither"])),
        now=TIME,
    ),
    "contexts": call(USER, project=ID, limit=arg(st.integers(1, 50))),
    "users": call(),
}

PUBLIC = sorted(n for n in vars(Engine) if not n.startswith("_") and callable(vars(Engine)[n]))


def test_every_public_method_gets_junk() -> None:
    """The junk test covers every public method (a new one must be added to ``CALLS``)."""
    assert set(PUBLIC) - {"close", "wait"} == set(CALLS)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data directory for every engine of the module (the store is in memory)."""
    return tmp_path_factory.mktemp("junk")


@pytest.mark.parametrize("method", sorted(CALLS))
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_junk_succeeds_or_raises_engrain_error_and_writes_nothing(
    method: str, data: st.DataObject, data_dir: Path
) -> None:
    """Any call: success, or an ``EngrainError`` and an unchanged store."""
    engine = Engine(settings=engine_settings(data_dir), embedder=HashEmbedder())
    try:
        world = seed(engine)
        for _ in range(data.draw(st.integers(1, 3), label="calls")):
            args, kwargs = data.draw(CALLS[method], label=method)
            check(engine, method, resolve(args, world), resolve(kwargs, world))
    finally:
        engine.close()


def outcome(run: Callable[[], Any]) -> str:
    """``"ok"``, or the class of the ``EngrainError`` raised (any other exception fails)."""
    try:
        run()
    except EngrainError as exc:
        return type(exc).__name__
    except Exception as exc:
        raise AssertionError(f"{type(exc).__name__} outside the error tree: {exc!r:.300}") from exc
    return "ok"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_async_engine_answers_junk_as_engine_does(data: st.DataObject, data_dir: Path) -> None:
    """The same junk call on identically seeded twins: the same outcome."""
    method = data.draw(st.sampled_from(sorted(CALLS)), label="method")
    args, kwargs = data.draw(CALLS[method], label=method)
    sync = Engine(settings=engine_settings(data_dir), embedder=HashEmbedder())
    twin = AsyncEngine(settings=engine_settings(data_dir), embedder=HashEmbedder())
    try:
        sync_world, async_world = seed(sync), seed(twin.sync)
        a, k = resolve(args, sync_world), resolve(kwargs, sync_world)
        expected = outcome(lambda: invoke(sync, method, a, k))
        a, k = resolve(args, async_world), resolve(kwargs, async_world)
        got = outcome(lambda: run_async(getattr(twin, method)(*a, **k)))
        assert got == expected, method
    finally:
        sync.close()
        twin.sync.close()


# -- the cases issue 11 lists ------------------------------------------------------------------

ASK = ("What does Ada drink in the morning?", "ada")
SAY = ("Ada met Bob in Lisbon last spring", "ada")
TURN_AT = {"speaker": "ada", "text": "We met in Lisbon last spring"}

#: (method, args, kwargs, the field the message must name or None)
BAD_CALLS: dict[str, tuple[str, tuple[Any, ...], dict[str, Any], str | None]] = {
    "context-top_k-negative": ("context", ASK, {"top_k": -1}, "top_k"),
    "context-top_k-zero": ("context", ASK, {"top_k": 0}, "top_k"),
    "context-top_k-float": ("context", ASK, {"top_k": 1.5}, "top_k"),
    "context-top_k-string": ("context", ASK, {"top_k": "1.5"}, "top_k"),
    "context-token_budget-float": ("context", ASK, {"token_budget": 1.5}, "token_budget"),
    "context-token_budget-string": ("context", ASK, {"token_budget": "100"}, "token_budget"),
    "context-token_budget-nan": ("context", ASK, {"token_budget": math.nan}, "token_budget"),
    "recall-token_budget-float": ("recall", ASK, {"token_budget": 1.5}, "token_budget"),
    "recall-top_k-float": ("recall", ASK, {"top_k": 1.5}, "top_k"),
    "recall-top_k-string": ("recall", ASK, {"top_k": "1.5"}, "top_k"),
    "context-now-string": ("context", ASK, {"now": "2024-01-01"}, "now"),
    "ingest-only-nul": ("ingest", ("\x00" * 12, "ada"), {}, None),
    "ingest-only-zero-width": ("ingest", ("\u200b\ufeff\u200b", "ada"), {}, None),
    "remember-only-control": ("remember", ("\x01\x02\x1b\x7f", "ada"), {}, None),
    "remember-nul-and-zero-width": ("remember", ("\x00\u200b \ufeff\x00", "ada"), {}, None),
    "context-only-nul": ("context", ("\x00\x00", "ada"), {}, None),
    "recall-only-zero-width": ("recall", ("\u200b", "ada"), {}, None),
    "remember-lone-surrogate": ("remember", ("Ada drinks tea \ud800", "ada"), {}, None),
    "ingest-lone-surrogate": ("ingest", ("Ada drinks tea \udcff daily", "ada"), {}, None),
    "remember-user-lone-surrogate": ("remember", ("Ada drinks tea", "ad\ud800a"), {}, "user_id"),
    "context-user-lone-surrogate": ("context", ("Which tea?", "\udcff"), {}, "user_id"),
    "forget-none": ("forget", (None, "ada"), {}, "memory_ids"),
    "forget-int": ("forget", (42, "ada"), {}, "memory_ids"),
    "remember-event_at-string": ("remember", SAY, {"event_at": "2024-01-01"}, "event_at"),
    "update-event_at-string": (
        "update",
        (Ref("mem0"), "ada"),
        {"event_at": "2024-01-01"},
        "event_at",
    ),
    "remember-domains-int": ("remember", SAY, {"domains": 123}, "domains"),
    "ingest-domains-int": ("ingest", SAY, {"domains": 123}, "domains"),
    "remember-importance-7": ("remember", SAY, {"importance": 7}, "importance"),
    "remember-session_id-list": ("remember", SAY, {"session_id": ["s1"]}, "session_id"),
    "ingest-session_id-list": ("ingest", SAY, {"session_id": ["s1"]}, "session_id"),
    "turn-at-garbage": ("ingest_conversation", ([{**TURN_AT, "at": "garbage"}], "ada"), {}, "at"),
    "turn-at-int": ("ingest_conversation", ([{**TURN_AT, "at": 123}], "ada"), {}, "at"),
    "turn-text-none": (
        "ingest_conversation",
        ([{"speaker": "ada", "text": None}], "ada"),
        {},
        "text",
    ),
    "update-pinned-string": ("update", (Ref("mem0"), "ada"), {"pinned": "no"}, "pinned"),
    "list-limit-negative": ("list", ("ada",), {"limit": -1}, "limit"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_issue_inputs_raise_validation_error_naming_the_field(case: str, tmp_path: Path) -> None:
    """Each input issue 11 lists: ``ValidationError`` naming the field, nothing written."""
    method, args, kwargs, field = BAD_CALLS[case]
    engine = Engine(settings=engine_settings(tmp_path), embedder=HashEmbedder())
    world = seed(engine)
    args = resolve(args, world)
    before = snapshot(engine, ["ada"])
    with pytest.raises(ValidationError) as raised:
        invoke(engine, method, args, kwargs)
    if field is not None:
        assert field in raised.value.message
    assert snapshot(engine, ["ada"]) == before


#: (the field changed in an exported memory record, its bad value)
BAD_RECORDS: dict[str, tuple[str, Any]] = {
    "user_id-null": ("user_id", None),
    "user_id-int": ("user_id", 5),
    "content-null": ("content", None),
    "content-int": ("content", 42),
    "content-only-nul": ("content", "\x00\x00"),
    "domains-string": ("domains", "abc"),
    "domains-int": ("domains", 123),
    "importance-7": ("importance", 7),
    "confidence-nan": ("confidence", math.nan),
    "access_count-negative": ("access_count", -5),
    "access_count-float": ("access_count", 1.5),
    "pinned-string": ("pinned", "no"),
    "muted-int": ("muted", 1),
    "created_at-garbage": ("created_at", "garbage"),
    "event_at-int": ("event_at", 123),
    "memory_type-unknown": ("memory_type", "dream"),
    "kind-null": ("kind", None),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_bad_import_record_is_refused_and_nothing_is_imported(case: str, tmp_path: Path) -> None:
    """A corrupt record refuses the whole import, naming the field; no record of it lands."""
    name, value = BAD_RECORDS[case]
    engine = Engine(settings=engine_settings(tmp_path), embedder=HashEmbedder())
    world = seed(engine)
    good = resolve(Patched({"id": "imported-good", "content": "Bob drinks mate at work"}), world)
    bad = resolve(Patched({name: value}), world)
    before = snapshot(engine, ["ada", "None", "5"])
    with pytest.raises(ValidationError) as raised:
        engine.import_records([good, bad])
    assert name in raised.value.message
    assert snapshot(engine, ["ada", "None", "5"]) == before


@pytest.mark.parametrize(
    "record",
    [
        {"type": "bogus", "user_id": "ada", "text": "Ada likes tea"},
        {"type": None, "user_id": "ada", "text": "Ada likes tea"},
        {"type": "text", "user_id": None, "text": "Ada likes tea"},
        {"type": "text", "user_id": "ada", "text": 42},
        {"type": "text", "user_id": "ada"},
        {"type": "conversation", "user_id": "ada", "turns": "not a list"},
        {"type": "conversation", "user_id": "ada", "turns": [{"text": "hi", "at": "garbage"}]},
        "not a record",
        None,
        42,
    ],
    ids=lambda r: repr(r)[:40],
)
def test_malformed_import_records_raise_validation_error(record: Any, tmp_path: Path) -> None:
    """Unknown record types, missing or wrong-typed fields, non-mappings: refused, and the
    valid text record before them is not written either."""
    engine = Engine(settings=engine_settings(tmp_path), embedder=HashEmbedder())
    seed(engine)
    good = {"type": "text", "user_id": "ada", "text": "Ada's sister lives in Porto now"}
    before = snapshot(engine, ["ada", "None"])
    with pytest.raises(ValidationError):
        engine.import_records([good, record])
    assert snapshot(engine, ["ada", "None"]) == before
