"""What the spot market did, read from the files that saw it: capacity traces, run folders and the
controller's journal. Each becomes instance lives and capacity outages per offering
(costsim.market_fit fits them).

- A capacity trace (the simulator's format: {"metadata": {"gap_seconds"}, "data": [0, 1, ...]}):
  its available stretches are lives (a stretch cut by the trace's end is censored), its unavailable
  stretches outages. A trace names no offering: `--offering` labels it (default `traces`).
- A run folder (`runner execute`): each `instance` event of the supervisors starts a life, ended by
  that node's `exit` event (`ended`: finished, preempted-notice, moved, cancelled, failed). A life with no
  exit (the instance vanished) ended at that node's last event, a preemption without notice on
  spot. Only spot lives are evidence of the spot market; the others are left out.
- A run folder that `costsim control` ran (it holds control.json): its journal, not its telemetry. The
  journal's times are trace time (a drill at --time-scale 600 lives 600 trace seconds a wall second),
  the telemetry's wall time; the journal also knows which instances the controller moved. A journal
  named beside its own folder counts once.
- A JSON file with `instances` (the controller's journal, control.json): each
  {"offering", "market", "start_s", "end_s", "ended"}; optional `outages`: {"offering", "start_s",
  "end_s"} (end_s null: capacity had not come back when the journal ended, censored).
"""

from __future__ import annotations

from pathlib import Path

from costsim.contract.telemetry import JOURNAL, read_events, run_folder
from costsim.errors import InputError
from costsim.io.files import read_json
from costsim.io.specs import BUNDLE_SUFFIX, bundle_timeline, bundle_windows, load_trace, trace_values
from costsim.market_fit import Span, trace_spans

PREEMPTED = ("preempted", "preempted-notice")
# costsim control's: stopped (the policy moved the job), lost (gone while no controller watched),
# withdrawn (a spot request that never ran)
ENDINGS = ("finished", "preempted-notice", "preempted", "moved", "cancelled", "failed", "stopped", "lost", "withdrawn")
TRACE_LABEL = "traces"

Observations = dict[str, tuple[list[Span], list[Span]]]   # offering -> (lives, outages)


def read_market(refs: list[str], offering: str | None = None, notes: list[str] | None = None) -> Observations:
    """Lives and outages per offering from every source; `offering` keeps only that one (and labels
    traces). A multi-node count trace is read as one node meets it (available where one instance could be had):
    the fit is one node's, as the planner's fitted model draws each node of a gang; a line in `notes` says so."""
    found: Observations = {}

    def add(label: str, lives: list[Span], outages: list[Span]) -> None:
        if offering is not None and label != offering:
            return
        have = found.setdefault(label, ([], []))
        have[0].extend(lives)
        have[1].extend(outages)

    read: set[Path] = set()
    for ref in refs:
        path = Path(ref)
        if path.is_dir() and (path / JOURNAL).is_file():   # a controlled run: its journal, in trace time
            path = path / JOURNAL
        if path.resolve() in read:
            continue
        read.add(path.resolve())
        if path.is_dir():
            for label, lives in _run_lives(path).items():
                add(label, lives, [])
            continue
        if BUNDLE_SUFFIX + "#" in path.name:   # one window of a bundle
            ticks, gap_s = load_trace(path)
            add(offering or TRACE_LABEL, *trace_spans(ticks, gap_s, source=str(path)))
            continue
        if path.name.endswith(BUNDLE_SUFFIX):   # windows cut from one trace count as that trace, each stretch once
            stitched = bundle_timeline(path)
            pieces = [(str(path), stitched[0].tolist(), stitched[1])] if stitched is not None else [
                (ref, ticks.tolist(), gap_s) for ref, ticks, gap_s in bundle_windows(path)]
            for source, ticks, gap_s in pieces:
                add(offering or TRACE_LABEL, *trace_spans(ticks, gap_s, source=source))
            continue
        doc = read_json(path)
        if isinstance(doc, dict) and "instances" in doc:
            for label, (lives, outages) in _journal(path, doc).items():
                add(label, lives, outages)
        elif isinstance(doc, dict) and "data" in doc:
            trace = trace_values(path)
            if trace.counts is not None and notes is not None:
                notes.append(f"{path}: a count trace of up to {trace.counts} instances, fitted as one node's capacity "
                             "(where at least one could be had); plans read it at their gang's size with "
                             "--market-trace")
            add(offering or TRACE_LABEL, *trace_spans(*trace.as_gang(1), source=str(path)))
        else:
            raise InputError(str(path), "file", "not a capacity trace (metadata.gap_seconds, data), a journal "
                             "with `instances`, nor a run folder")
    return found


def _run_lives(folder: Path) -> dict[str, list[Span]]:
    events = read_events(run_folder(folder))
    lives: dict[str, list[Span]] = {}
    open_lives: dict[int, tuple[dict, float]] = {}   # node -> (its instance event, the job's last event)

    def close(node: int, end_t: float, ended: str) -> None:
        start, _ = open_lives.pop(node)
        if start.get("market") != "spot":
            return
        lives.setdefault(str(start.get("offering", "")), []).append(
            Span(end_t - start["t"], event=ended in PREEMPTED, ended=ended, source=str(folder)))

    for e in events:
        node = e.get("node", 0) if e.get("rank") is None else None
        if e["event"] == "instance" and node is not None:
            if node in open_lives:   # the last life on this node ended without an exit
                close(node, open_lives[node][1], open_lives[node][0].get("noticed") or "preempted")
            open_lives[node] = (e, e["t"])
        elif e["event"] == "exit" and node in open_lives:
            close(node, e["t"], e.get("ended", "failed"))
        else:   # workers name no node: any event of the job shows its instances were still there
            for key, (start, _) in open_lives.items():
                open_lives[key] = (start, e["t"])
            if e["event"] == "notice" and node in open_lives:   # how the life ends if no exit follows
                open_lives[node] = (open_lives[node][0] | {"noticed": e.get("ended")}, e["t"])
    for node in list(open_lives):
        close(node, open_lives[node][1], open_lives[node][0].get("noticed") or "preempted")
    return lives


def _journal(path: Path, doc: dict) -> Observations:
    out: Observations = {}
    for where, item in _mappings(path, doc, "instances", "{offering, market, start_s, end_s, ended}"):
        ended = item.get("ended")
        if ended not in ENDINGS:
            raise InputError(str(path), f"{where}.ended", f"got {ended!r}; allowed: {', '.join(ENDINGS)}")
        start, end = _interval(path, where, item.get("start_s"), f"{where}.end_s", item.get("end_s"))
        if item.get("market") == "spot":
            out.setdefault(str(item.get("offering", "")), ([], []))[0].append(
                Span(end - start, event=ended in PREEMPTED, ended=ended, source=str(path)))
    for where, item in _mappings(path, doc, "outages", "{offering, start_s, end_s}", required=False):
        back = item.get("end_s") is not None   # null: capacity not back when the journal ended (censored)
        start, end = (_interval(path, where, item.get("start_s"), f"{where}.end_s", item["end_s"]) if back
                      else _interval(path, where, item.get("start_s"), "end_s", doc.get("end_s")))
        out.setdefault(str(item.get("offering", "")), ([], []))[1].append(
            Span(end - start, event=back, ended="capacity-back" if back else "journal-end", source=str(path)))
    return out


def _mappings(path: Path, doc: dict, key: str, shape: str, required: bool = True):
    """(where, entry) for each entry of the list doc[key], each checked to be a mapping."""
    entries = doc[key] if required else doc.get(key) or []
    if not isinstance(entries, list):
        raise InputError(str(path), key, f"expected a list of {shape}")
    for index, item in enumerate(entries):
        if not isinstance(item, dict):
            raise InputError(str(path), f"{key}[{index}]", "expected a mapping")
        yield f"{key}[{index}]", item


def _interval(path: Path, where: str, start, end_field: str, end) -> tuple[float, float]:
    """(start, end) in seconds, each checked; `end_field` names where the end came from."""
    start_s, end_s = _seconds(path, f"{where}.start_s", start), _seconds(path, end_field, end)
    if end_s < start_s:
        raise InputError(str(path), end_field, f"{end_s:g} is before {where}.start_s {start_s:g}")
    return start_s, end_s


def _seconds(path: Path, field: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InputError(str(path), field, f"got {value!r}; expected seconds >= 0")
    return float(value)
