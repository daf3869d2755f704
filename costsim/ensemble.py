"""The spot market as an ensemble: what real capacity did, and what the fits of it allow.

One renewal fit pooled over zones says a spot-only plan meets its deadline 93% of the time; replayed
on the very zones it was fitted to, the plan meets it in 19% to 99% of windows depending on the zone
(docs/model.md). Zones differ by days of outage, and a fit knows nothing of the periods and instance
sizes it never saw. So a plan draws each trial's capacity from an ensemble of groups (a zone's trace,
a period's windows), each group equally likely, but those measured in the job's own region, which weigh
`MarketSpec.home_weight` times as much (zones of a region move together):

- replay (`replay_share` of the trials): a whole window of the group's real capacity, as it
  happened, from a random start (a long trace) or one of its windows (a bundle), so that day-long
  outages and their correlation survive; a window shorter than the job's horizon goes on with the
  group's fit;
- draw (the rest): the group's own renewal fit (Weibull lives; outages by the family that fits them
  best, lognormal on every shipped group) at parameters drawn from the fit's uncertainty (the
  asymptotic normal of the censored MLE).

A gang of n nodes draws n independent windows (or draws) from its group and runs while all n can (told a recent
capacity, windows that share no hour where the like pasts allow: `Starts.gang`).
Trial i of every configuration faces group i mod G with the same stream, so candidates are compared
on common capacity. `costsim validate` measures how honest the result is, group by group.

Told the job's recent capacity (`Recent`: the share of the last 72 h with capacity where it will run, and
whether it has capacity now and since when, `costsim plan --recent-trace/--recent-share`), every trial replays:
each group gets trials in proportion to how like that its windows' own pasts were (a Gaussian kernel of the
shares' distance, times, where the state is known, a match of the state and a kernel of its age; averaged
over the group's starts; trial i's group by a low-discrepancy sequence, the same for every
configuration), and within the group each start, hourly where the trace holds its whole past, by its
own kernel weight. A bundle's windows cut from one trace are stitched back into it (io.specs.bundle_timeline) and
start where they did, with the past they had; a bundle's other windows have no past and get no trials then.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from costsim.errors import InputError
from costsim.io.specs import traces_in
from costsim.market_fit import Span, family_mean_s, fit_outage_families, fit_weibull
from costsim.sim.market import ArrayTimeline, HazardModel, Timeline, drawn_stretches, intersect
from costsim.units import format_duration

DEFAULT_REPLAY_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A group of capacity: a name, the period it saw, its trace files (or bundles), and the cloud region it was
    measured in where its name says (`region_of`; "": not known)."""

    name: str
    period: str
    paths: tuple[str, ...]
    region: str = ""


# A cloud zone in a name: AWS's us-west-2b (region us-west-2), GCP's us-central1-a (region us-central1).
_ZONE = re.compile(r"(?<![a-z0-9])(?:([a-z]+-[a-z]+-[0-9]+)[a-z]|([a-z]+-[a-z]+[0-9]+)-[a-z])(?![a-z0-9])")


def region_of(name: str) -> str:
    """The region of the first cloud zone named in `name` (a group's or a trace file's: spot-traces name files
    zone_gpu_nodes): 'us-west-2a_v100_1' -> 'us-west-2', 'us-central1-a' -> 'us-central1'; '' where none is."""
    match = _ZONE.search(name)
    return (match.group(1) or match.group(2)) if match else ""


# How much more a capacity group measured in the job's own region weighs than one from elsewhere (MarketSpec.home):
# zones of one region move together (in 2023 the flagship's spot-only job met its deadline in 20-32% of the
# us-west-2 zones' windows, 79-99% of us-east-1's), so the region's groups say more of the job's market.
# Chosen by leaving each group out (docs/model.md, "The job's region"): 3 takes most of the gain that 10 gives
# while the other regions keep a third or more of the trials, so a plan is no surer than the spread across its
# proxies; 1 weighs every group the same.
DEFAULT_HOME_WEIGHT = 3.0
DEFAULT_RECENT_PAST_S = 72 * 3600.0   # how far back the recent capacity looks (docs/model.md: why 72 h)
DEFAULT_RECENT_BANDWIDTH = 0.1        # the kernel's width, in past share
AGE_BANDWIDTH = 0.5                   # the state's age kernel's width, in log(1 + hours) (docs/model.md: not tuned)
RECENT_STRIDE_S = 3600.0              # a conditioned replay starts on this grid of its trace


@dataclass(frozen=True, slots=True)
class State:
    """Where the job's market stands now: whether it had capacity at the last look, and how long it had been
    so (at most the recent past: no further back is compared, so a whole past in one state reads as that past;
    None where not known: the state alone is compared)."""

    up: bool
    age_s: float | None

    def as_dict(self) -> dict:
        return {"up": self.up, "age_s": self.age_s}

    def describe(self, past_s: float) -> str:
        """'down for 5.0h'; an age of the whole past: 'down for 3.0d or more'; no age: 'down'."""
        word = "up" if self.up else "down"
        if self.age_s is None:
            return word
        return f"{word} for {format_duration(min(self.age_s, past_s))}" + (" or more" if self.age_s >= past_s else "")


@dataclass(frozen=True, slots=True)
class Recent:
    """The capacity the job's own market had just before it starts: the share of the last `past_s` with
    capacity, and where it stands now (`state`, when known). A market given it weighs each replayed window by
    how like this its own past was: its share, and its state at the start and that state's age (a renewal
    process's future hangs on exactly those two)."""

    share: float
    past_s: float = DEFAULT_RECENT_PAST_S
    bandwidth: float = DEFAULT_RECENT_BANDWIDTH
    source: str = ""   # where the share came from: a trace file, or --recent-share
    # from a multi-node count trace: the share of the past in which at least k of its instances could be had,
    # k = 1, 2, ... (`share` is k = 1's), and the state of each such gang
    gang_shares: tuple[float, ...] = ()
    state: State | None = None
    gang_states: tuple[State, ...] = ()

    def as_dict(self) -> dict:
        out = {"share": self.share, "past_s": self.past_s, "bandwidth": self.bandwidth, "source": self.source}
        if self.state is not None:
            out["state"] = self.state.as_dict()
        if self.gang_shares:
            out["gang_shares"] = list(self.gang_shares)
        if self.gang_states:
            out["gang_states"] = [s.as_dict() for s in self.gang_states]
        return out

    @classmethod
    def from_dict(cls, doc: dict) -> Recent:
        """From plan.json's prediction.market.recent (checked by costsim.contract.plan)."""
        def state(d: dict) -> State:
            return State(up=bool(d["up"]), age_s=None if d.get("age_s") is None else float(d["age_s"]))
        return cls(share=float(doc["share"]), past_s=float(doc["past_s"]), bandwidth=float(doc["bandwidth"]),
                   source=str(doc.get("source", "")), gang_shares=tuple(float(v) for v in doc.get("gang_shares", ())),
                   state=state(doc["state"]) if doc.get("state") else None,
                   gang_states=tuple(state(d) for d in doc.get("gang_states", ())))

    def at(self, gang: int) -> Recent:
        """The recent capacity of a gang of `gang` nodes where a count trace reads it (the share of the past in
        which that many could be had, and their state now): from a count trace, its figures at `gang` (a gang
        larger than it counts: at the most it counts, an upper bound); a share given by number or read from a
        1-node trace is taken as the gang's own."""
        if not self.gang_shares:
            return self
        k = min(gang, len(self.gang_shares)) - 1
        return replace(self, share=self.gang_shares[k],
                       state=self.gang_states[k] if self.gang_states else self.state)

    def kernel(self, shares: np.ndarray, ups: np.ndarray | None = None,
               ages_s: np.ndarray | None = None) -> np.ndarray:
        """How like this past each of these was: a Gaussian kernel of the shares' distance; where the state is
        known, times 0 for pasts that ended in the other state, and where its age is known, times a Gaussian kernel
        (width AGE_BANDWIDTH) of the distance of the states' ages in log(1 + hours)."""
        weight = np.exp(-0.5 * ((np.asarray(shares, dtype=float) - self.share) / self.bandwidth) ** 2)
        if self.state is None or ups is None or ages_s is None:
            return weight
        weight = weight * (np.asarray(ups, dtype=bool) == self.state.up)
        if self.state.age_s is None:
            return weight
        age = math.log1p(min(self.state.age_s, self.past_s) / 3600.0)
        ages = np.log1p(np.minimum(np.asarray(ages_s, dtype=float), self.past_s) / 3600.0)
        return weight * np.exp(-0.5 * ((ages - age) / AGE_BANDWIDTH) ** 2)

    def describe(self) -> str:
        """'0.40 over 72 h, down for 5 h'"""
        out = f"{self.share:.2f} over {self.past_s / 3600:g} h"
        return out + (f", {self.state.describe(self.past_s)}" if self.state is not None else "")


@dataclass(frozen=True, slots=True)
class MarketSpec:
    """What a plan's spot market is made of (small, hashable: plan.json carries it)."""

    name: str
    groups: tuple[GroupSpec, ...]
    replay_share: float = DEFAULT_REPLAY_SHARE
    recent: Recent | None = None   # the job's recent capacity: replays weighed by their past (module doc)
    # the region the job runs in ("": not known, or no group was measured there): its groups weigh home_weight
    # times as much as the others
    home: str = ""
    home_weight: float = 1.0

    def at_home(self, region: str, weight: float) -> MarketSpec:
        """This market for a job in `region`: its groups measured there weigh `weight` times the others'; the
        market as it is where none was, the region is not known ("": a group whose name says no zone is not
        measured in it) or the weight is 1, so jobs elsewhere share its trials' capacity."""
        if weight == 1.0 or not region or not any(g.region == region for g in self.groups):
            return replace(self, home="", home_weight=1.0)
        return replace(self, home=region, home_weight=weight)

    def prior(self) -> np.ndarray:
        """Each group's weight before the recent capacity weighs it: home_weight for the home region's, else 1."""
        return np.array([self.home_weight if self.home and g.region == self.home else 1.0 for g in self.groups])

    def without(self, name: str) -> MarketSpec:
        """The market without one group: leave-one-group-out validation."""
        kept = tuple(g for g in self.groups if g.name != name)
        if len(kept) == len(self.groups):
            raise InputError("--group", "group", f"unknown {name!r}; allowed: {', '.join(self.group_names)}")
        return replace(self, groups=kept, name=f"{self.name} without {name}")

    @property
    def group_names(self) -> list[str]:
        return [g.name for g in self.groups]

    def as_dict(self) -> dict:
        out: dict = {"name": self.name, "replay_share": self.replay_share,
                     "groups": [{"name": g.name, "period": g.period, "traces": list(g.paths),
                                 **({"region": g.region} if g.region else {})} for g in self.groups]}
        if self.home:
            out.update(home=self.home, home_weight=self.home_weight)
        return {**out, "recent": self.recent.as_dict()} if self.recent is not None else out

    @classmethod
    def from_dict(cls, doc: dict) -> MarketSpec:
        """From plan.json's prediction.market (checked by costsim.contract.plan)."""
        recent = doc.get("recent")
        return cls(name=doc["name"], replay_share=float(doc["replay_share"]),
                   groups=tuple(GroupSpec(name=g["name"], period=g["period"], paths=tuple(g["traces"]),
                                          region=str(g.get("region", ""))) for g in doc["groups"]),
                   recent=Recent.from_dict(recent) if recent else None, home=str(doc.get("home", "")),
                   home_weight=float(doc.get("home_weight", 1.0)))


@dataclass(frozen=True, slots=True)
class Window:
    """Available stretches of one real window, seconds from its start."""

    starts: np.ndarray
    ends: np.ndarray
    length_s: float
    slide: bool = False   # a long trace: a trial's window starts anywhere in it (a bundle's: at its start)
    # where a bundle's window starts when its windows were stitched into the trace they were cut from (its
    # stretches are then that whole trace's, shared by the bundle's windows): what came before is its past
    origin: float = 0.0
    counts_up_to: int | None = None   # a multi-node count trace's: the most instances it counts


@dataclass(frozen=True, slots=True)
class GroupFit:
    """A group's renewal fit: Weibull lives and its best outage family, each with the covariance of
    its (log-)parameters, so that a draw can carry the fit's uncertainty."""

    life_log: tuple[float, float]          # (log shape, log scale)
    life_cov: tuple
    wait_family: str
    wait_params: tuple[float, ...]
    wait_cov: tuple
    lives: int
    outages: int

    def draw(self, rng: np.random.Generator) -> HazardModel:
        """A HazardModel at parameters drawn from the fit's asymptotic normal."""
        log_k, log_lam = _draw_normal(rng, self.life_log, self.life_cov)
        k = math.exp(min(max(log_k, math.log(0.1)), math.log(10.0)))
        wait = _draw_normal(rng, self.wait_params, self.wait_cov)
        wait_shape = 1.0 if self.wait_family == "exponential" else math.exp(
            wait[0] if self.wait_family == "weibull" else wait[1])
        return HazardModel(mtbf_s=math.exp(log_lam) * math.gamma(1.0 + 1.0 / k), shape=k,
                           wait_mean_s=family_mean_s(self.wait_family, wait), wait_family=self.wait_family,
                           wait_shape=wait_shape)

    def describe(self) -> dict:
        k, lam = (math.exp(v) for v in self.life_log)
        return {"life_weibull_shape": round(k, 3), "mean_life_h": round(lam * math.gamma(1 + 1 / k) / 3600, 3),
                "outage_family": self.wait_family,
                "mean_outage_h": round(family_mean_s(self.wait_family, self.wait_params) / 3600, 3),
                "lives": self.lives, "outages": self.outages}


# A parameter draw strays at most this far (in log terms: a factor of e) from the estimate: a fit of
# a few alike durations has an information matrix close to singular, and an unbounded draw from it
# would give day-long lives or outages of a microsecond.
MAX_DRAW_STEP = 1.0


def _draw_normal(rng: np.random.Generator, mean, cov) -> tuple[float, ...]:
    if not cov:
        return tuple(mean)
    centre = np.asarray(mean, dtype=float)
    drawn = rng.multivariate_normal(centre, np.asarray(cov), method="eigh")
    return tuple(float(v) for v in np.clip(drawn, centre - MAX_DRAW_STEP, centre + MAX_DRAW_STEP))


@dataclass(frozen=True, slots=True, eq=False)
class Group:
    name: str
    period: str
    windows: tuple[Window, ...]
    fit: GroupFit
    # where its traces count instances (multi-node count traces, io.specs.load_trace), the most they count: a
    # gang of n meets one window of them read at n (`for_gang`), not n windows read as one node each
    counts_up_to: int | None = None
    gang: int = 1   # the gang its count traces were read as (build_group)

    def replay(self, rng: np.random.Generator, horizon_s: float) -> tuple[np.ndarray, np.ndarray]:
        """One node's stretches from a real window (continued by the fit past the window's end)."""
        window = self.windows[int(rng.integers(len(self.windows)))] if len(self.windows) > 1 else self.windows[0]
        offset = float(rng.uniform(0.0, max(window.length_s - horizon_s, 0.0))) if window.slide else window.origin
        return self.replay_at(rng, window, offset, horizon_s)

    def replay_at(self, rng: np.random.Generator, window: Window, offset: float,
                  horizon_s: float) -> tuple[np.ndarray, np.ndarray]:
        """The stretches of `window` from `offset` on, for `horizon_s` (the fit goes on past its end)."""
        first = int(np.searchsorted(window.ends, offset, side="right"))
        last = int(np.searchsorted(window.starts, offset + horizon_s, side="left"))
        starts = np.maximum(window.starts[first:last] - offset, 0.0)
        ends = np.minimum(window.ends[first:last] - offset, horizon_s)
        known_s = window.length_s - offset
        if known_s < horizon_s:   # past the window nothing was seen: the group's fit goes on
            more = drawn_stretches(self.fit.draw(rng), rng, known_s, horizon_s)
            starts, ends = np.concatenate([starts, more[0]]), np.concatenate([ends, more[1]])
        return starts, ends

    def drawn(self, rng: np.random.Generator, horizon_s: float) -> tuple[np.ndarray, np.ndarray]:
        return drawn_stretches(self.fit.draw(rng), rng, 0.0, horizon_s)


def recent_from_trace(path: str, past_s: float = DEFAULT_RECENT_PAST_S,
                      bandwidth: float = DEFAULT_RECENT_BANDWIDTH) -> Recent:
    """The recent capacity from a trace of the job's own market up to now (spot-traces' format, as
    --market-trace takes): the share of its last `past_s` with capacity and its state at its end; from a multi-node
    count trace, those for every gang up to the most it counts (io.specs.load_trace: a gang of n has capacity where
    n could be had)."""
    from costsim.io.specs import trace_values
    trace = trace_values(path)
    needed = math.ceil(past_s / trace.gap_s - 1e-9)
    if len(trace.values) < needed:
        raise InputError(path, "data", f"{len(trace.values)} ticks of {trace.gap_s:g} s "
                         f"({len(trace.values) * trace.gap_s / 3600:.1f} h): the recent capacity looks back "
                         f"{past_s / 3600:g} h; give a longer trace or a shorter --recent-past")
    shares, states = [], []
    for gang in range(1, (trace.counts or 1) + 1):
        ticks = trace.as_gang(gang)[0][-needed:]
        shares.append(float(np.mean(np.asarray(ticks) == 0)))
        # its state now, read as a replayed window's at its start (state_before): the two sides of the kernel alike
        window = _window(ticks, trace.gap_s, path, [], [], slide=False)
        states.append(state_before(window, window.length_s, past_s))
    counted = trace.counts is not None
    return Recent(share=shares[0], past_s=past_s, bandwidth=bandwidth, source=path, state=states[0],
                  gang_shares=tuple(shares) if counted else (), gang_states=tuple(states) if counted else ())


def with_recent(spec: MarketSpec, recent: Recent) -> MarketSpec:
    return replace(spec, recent=recent, name=f"{spec.name}, recent capacity {recent.describe()}")


def past_share(window: Window, offset: float, past_s: float) -> float:
    """The share of the `past_s` before `offset` in `window` with capacity (NaN where the window has less
    past than that)."""
    if offset < past_s or past_s <= 0:
        return float("nan")
    lo, hi = offset - past_s, offset
    return float(np.clip(np.minimum(window.ends, hi) - np.maximum(window.starts, lo), 0.0, None).sum() / past_s)


def state_before(window: Window, offset: float, past_s: float) -> State:
    """Whether `window` had capacity just before `offset` (its last tick before it) and for how long it had been
    so, at most `past_s` (as a recent trace of `past_s` reads it: `recent_from_trace`)."""
    i = int(np.searchsorted(window.starts, offset, side="left")) - 1   # the last stretch that began before it
    if i >= 0 and window.ends[i] >= offset:
        return State(up=True, age_s=min(offset - float(window.starts[i]), past_s))
    since = float(window.ends[i]) if i >= 0 else 0.0
    return State(up=False, age_s=min(offset - since, past_s))


# A told gang's nodes replay starts that share no hour where those carry at least this share of the kernel's weight
# (Starts.gang); below it, the like starts sharing the fewest hours. Not tuned: a round figure (docs/model.md).
MIN_APART = 0.05


@dataclass(frozen=True, slots=True, eq=False)
class Starts:
    """A group's replay starts under a recent capacity: (window, offset) pairs and their probabilities."""

    windows: np.ndarray   # index into the group's windows
    offsets: np.ndarray   # seconds into that window
    p: np.ndarray         # sums to 1
    weight: float         # the group's mean kernel: how like the recent capacity its pasts were
    # the trace each start lies on (a stitched bundle's windows share one): starts on one trace less than a
    # horizon apart saw some of the same hours
    traces: np.ndarray

    def gang(self, rng: np.random.Generator, nodes: int, horizon_s: float) -> list[int]:
        """The starts a gang of `nodes` independent nodes replays: the first by its weight, each other by its
        weight among the starts that share no hour with the gang's so far (on another trace, or a horizon or more
        away on the same one), as independent nodes of one market with one past would. Adjacent hourly starts
        are nearly one window, and a kernel that likes few pasts weighs a few runs of them: drawn without this,
        47-100% of a 4-node gang's draws had two nodes within 36 h of each other on one trace, nodes that in
        effect fail together. Where the starts that far carry under `MIN_APART` of the weight (the pasts like the
        told one lie in one stretch of one trace), drawing among them would give the gang pasts unlike the told
        one; then each start's weight is also scaled by the share of the horizon it does not share with the gang,
        the like starts that share the fewest hours first (costsim.validate.apart_partners pairs the check's
        windows the same way: its bin's windows, the fewest shared hours where none is apart)."""
        picks = [int(rng.choice(len(self.p), p=self.p))]
        shared = np.zeros(len(self.p))   # each start's most hours shared with one of the gang's, so far
        for _ in range(nodes - 1):
            last = picks[-1]
            near = np.clip(horizon_s - np.abs(self.offsets - self.offsets[last]), 0.0, None)
            shared = np.maximum(shared, np.where(self.traces == self.traces[last], near, 0.0))
            weights = np.where(shared > 0, 0.0, self.p)
            if not weights.sum() >= MIN_APART:
                weights = self.p * (1.0 - shared / horizon_s)
            if not weights.sum() > 0:   # every start is one of the gang's (one window, one start)
                weights = self.p
            picks.append(int(rng.choice(len(self.p), p=weights / weights.sum())))
        return picks


def conditioned_starts(group: Group, recent: Recent, stride_s: float = RECENT_STRIDE_S) -> Starts | None:
    """Every start of a long trace's window, `stride_s` apart, with `recent.past_s` of past before it, and every
    bundle window's own start with that much past on the trace its bundle was stitched into, weighed by how like
    the recent capacity its past was (`Recent.kernel`: its share, and its state then where that is known); None
    where no window has such a past (a bundle's
    windows that could not be stitched have none: they are replayed from their start, knowing nothing before)."""
    windows, offsets, shares, ups, ages = [], [], [], [], []
    trace_of: dict[int, int] = {}   # a stitched bundle's windows share their trace's stretches
    for index, window in enumerate(group.windows):
        if window.slide and window.length_s > recent.past_s:
            candidates = np.arange(recent.past_s, window.length_s - stride_s + 1e-9, stride_s).tolist()
        elif not window.slide and window.origin >= recent.past_s:
            candidates = [window.origin]
        else:
            continue
        for offset in candidates:
            windows.append(index)
            offsets.append(offset)
            shares.append(past_share(window, offset, recent.past_s))
            state = state_before(window, offset, recent.past_s)
            ups.append(state.up)
            ages.append(state.age_s)
    if not windows:
        return None
    kernel = recent.kernel(np.array(shares), np.array(ups), np.array(ages))
    total = float(kernel.sum())
    if not total > 0:
        return None
    traces = np.array([trace_of.setdefault(id(group.windows[w].starts), len(trace_of)) for w in windows])
    return Starts(windows=np.array(windows), offsets=np.array(offsets), p=kernel / total,
                  weight=total / len(kernel), traces=traces)


GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
# A group whose windows hold no preemption (or no outage that ended) has no fit of its own for them: it gets
# exponential ones of the mean under which none in that much time has even odds (its exposure / ln 2, the
# zero-failure median estimate), without a parameter spread. A count trace read at one instance often has no
# outage at all: at least one of the instances asked for could always be had.
NO_EVENT_ODDS = math.log(2.0)
UNSEEN_OUTAGE_S = 60.0


@dataclass(frozen=True, slots=True, eq=False)
class Conditioning:
    """A market told a recent capacity, for one gang size: each group's weighed replay starts and the groups'
    cumulative weights."""

    starts: tuple[Starts | None, ...]
    cumulative: np.ndarray


@dataclass(frozen=True, slots=True, eq=False)
class MarketEnsemble:
    """The built market: its groups with their windows and fits (crosses processes by pickling)."""

    spec: MarketSpec
    groups: tuple[Group, ...]
    names: tuple[str, ...] = field(default=())
    # with a recent capacity: its conditioning per gang size (one for every gang where no group counts instances:
    # each node of a 1-node trace's gang is weighed by one node's past)
    conditioned: dict[int, Conditioning] = field(default_factory=dict)
    # the groups' cumulative weights where they do not all weigh the same (a job in a region: MarketSpec.home)
    weighed: np.ndarray | None = None

    def conditioning(self, nodes: int) -> Conditioning | None:
        """The recent capacity's weights for a gang of `nodes` (None without one): a count group's windows
        are weighed by the past of that gang read at its size (`for_gang`), the others by one node's."""
        if self.spec.recent is None:
            return None
        key = nodes if any(g.counts_up_to is not None for g in self.groups) else 1
        if key not in self.conditioned:
            self.conditioned[key] = _conditioning(self.spec, self.groups, key)
        return self.conditioned[key]

    def group_of(self, trial: int, nodes: int = 1) -> int:
        """The group trial `trial` faces: i mod G, or where the groups weigh differently (the job's region, a
        recent capacity for a gang of `nodes`) in proportion to their weights by a low-discrepancy sequence (the
        same for every configuration: common capacity)."""
        return self._group_of(trial, self.conditioning(nodes))

    def _group_of(self, trial: int, told: Conditioning | None) -> int:
        cumulative = told.cumulative if told is not None else self.weighed
        if cumulative is None:
            return trial % len(self.groups)
        return int(np.searchsorted(cumulative, (trial * GOLDEN) % 1.0, side="right"))

    def timeline(self, rng: np.random.Generator, trial: int, nodes: int, horizon_s: float) -> tuple[Timeline, int]:
        """Trial `trial`'s capacity for a gang of `nodes`, and the index of the group it came from."""
        told = self.conditioning(nodes)
        index = self._group_of(trial, told)
        group = self.groups[index]
        draws = nodes
        if group.counts_up_to is not None:
            group, draws = for_gang(self.spec.groups[index], nodes)
        starts = told.starts[index] if told is not None else None
        replay = starts is not None or rng.random() < self.spec.replay_share
        stretches = None
        # each node's window from the group's starts like the recent capacity, none sharing an hour with another's
        picks = starts.gang(rng, draws, horizon_s) if starts is not None else []
        for node_index in range(draws):
            if starts is not None:
                pick = picks[node_index]
                node = group.replay_at(rng, group.windows[int(starts.windows[pick])], float(starts.offsets[pick]),
                                       horizon_s)
            else:
                node = group.replay(rng, horizon_s) if replay else group.drawn(rng, horizon_s)
            stretches = node if stretches is None else intersect(stretches, node)
        assert stretches is not None
        return ArrayTimeline(*stretches), index


def windows_of(path: str, gang: int = 1) -> tuple[tuple[Window, ...], list, list]:
    """A trace file's (or bundle's) windows, and its lives and outages; a multi-node count trace's as a gang of
    `gang` nodes meets it (io.specs.load_trace). A bundle whose windows were cut from one
    trace (io.specs.bundle_timeline) is stitched back into it: its windows start where they did on it, with the
    past it had, and its lives and outages are counted once, not once for every window that overlaps them."""
    from costsim.io.specs import BUNDLE_SUFFIX, bundle_timeline, bundle_windows, trace_values
    path = _shipped(path)
    lives: list[Span] = []
    outages: list[Span] = []
    if path.endswith(BUNDLE_SUFFIX):
        stitched = bundle_timeline(path)
        if stitched is not None:
            ticks, gap_s, origins = stitched
            whole = _window(ticks, gap_s, path, lives, outages, slide=False)
            return tuple(replace(whole, origin=origin * gap_s) for origin in origins), lives, outages
    if path.endswith(BUNDLE_SUFFIX):
        return tuple(_window(ticks, gap_s, ref, lives, outages, slide=False)
                     for ref, ticks, gap_s in bundle_windows(path)), lives, outages
    trace = trace_values(path)
    window = _window(*trace.as_gang(gang), path, lives, outages, slide=True)
    return (replace(window, counts_up_to=trace.counts),), lives, outages


def _shipped(path: str) -> str:
    """A trace's path; a shipped trace may be named relative to the data folder."""
    from costsim.io.files import data_dir
    return str(data_dir() / path) if not Path(path).is_absolute() and not Path(path).exists() else path


def _window(ticks, gap_s: float, ref: str, lives: list[Span], outages: list[Span], *, slide: bool) -> Window:
    """One trace's available stretches; its lives and outages appended to those lists."""
    values = np.asarray(ticks, dtype=np.int8)
    n = len(values)
    up = np.concatenate([[0], (values == 0).astype(np.int8), [0]])
    change = np.diff(up)
    up_starts, up_ends = np.flatnonzero(change == 1), np.flatnonzero(change == -1)
    down = np.concatenate([[0], (values != 0).astype(np.int8), [0]])
    change = np.diff(down)
    down_starts, down_ends = np.flatnonzero(change == 1), np.flatnonzero(change == -1)
    # a stretch that starts at the first tick is left-truncated (its age unknown): left out, as in
    # market_fit.trace_spans; one that reaches the last tick is censored
    for starts, ends, into, ended in ((up_starts, up_ends, lives, "preempted"),
                                      (down_starts, down_ends, outages, "capacity-back")):
        for start, end in zip(starts.tolist(), ends.tolist()):
            if start > 0:
                into.append(Span((end - start) * gap_s, event=end < n, ended=ended if end < n else "trace-end",
                                 source=ref))
    return Window(starts=up_starts * float(gap_s), ends=up_ends * float(gap_s), length_s=n * gap_s, slide=slide)


def for_gang(spec: GroupSpec, nodes: int) -> tuple[Group, int]:
    """How a gang of `nodes` meets a group: the group, its count traces read at some size, and how many of its
    windows (or draws) each trial takes, all of which must have capacity. Traces of one node's capacity: `nodes`
    windows, as independent nodes. Multi-node count traces: one window, read as `nodes` instances (available where
    that many could be had), with the group's fit made of those windows' lives and outages; a gang larger than
    the traces count (they asked for fewer instances) as the fewest independent parts of at most that many."""
    group = build_group(spec)
    if group.counts_up_to is None or nodes == 1:
        return group, nodes
    parts = math.ceil(nodes / group.counts_up_to)
    return build_group(spec, math.ceil(nodes / parts)), parts


@functools.lru_cache(maxsize=64)
def build_group(spec: GroupSpec, gang: int = 1) -> Group:
    """A group's windows and its fit, its count traces read as a gang of `gang` nodes meets them (cached:
    validation builds every market from the same groups)."""
    windows: list[Window] = []
    lives: list = []
    outages: list = []
    for path in spec.paths:
        found, up, down = windows_of(path, gang)
        windows += found
        lives += up
        outages += down
    life = fit_weibull(lives)
    families = fit_outage_families(outages)
    up_s = sum(float(np.sum(w.ends - w.starts)) for w in windows)
    down_s = sum(w.length_s for w in windows) - up_s
    if life is not None:
        life_log, life_cov = (math.log(life.shape), math.log(life.scale_s)), life.cov
    else:   # no preemption in its windows: exponential lives of the mean that gives even odds of none in them
        life_log, life_cov = (0.0, math.log(max(up_s, 1.0) / NO_EVENT_ODDS)), ()
    if families:
        best = families[0]
        wait = (best.family, best.params, best.cov)
    else:   # no outage that ended: likewise (none at all: outages of a minute, never seen)
        wait = ("exponential", (math.log(down_s / NO_EVENT_ODDS if down_s > 0 else UNSEEN_OUTAGE_S),), ())
    fit = GroupFit(life_log=life_log, life_cov=life_cov, wait_family=wait[0], wait_params=wait[1], wait_cov=wait[2],
                   lives=len(lives), outages=len(outages))
    counted = [w.counts_up_to for w in windows if w.counts_up_to is not None]
    return Group(name=spec.name, period=spec.period, windows=tuple(windows), fit=fit,
                 counts_up_to=max(counted) if counted else None, gang=gang)


@functools.lru_cache(maxsize=32)
def build(spec: MarketSpec) -> MarketEnsemble:
    if not spec.groups:
        raise InputError("--market-trace", "market", f"{spec.name}: the market has no capacity groups")
    groups = tuple(build_group(g) for g in spec.groups)
    prior = spec.prior()
    market = MarketEnsemble(spec=spec, groups=groups, names=tuple(g.name for g in groups),
                            weighed=_cumulative(prior) if np.ptp(prior) > 0 else None)
    market.conditioning(1)   # a recent capacity no window's past can be compared with stops the plan here
    return market


def _conditioning(spec: MarketSpec, groups: tuple[Group, ...], nodes: int) -> Conditioning:
    assert spec.recent is not None
    starts = []
    for group_spec, group in zip(spec.groups, groups):
        if group.counts_up_to is not None:   # weighed by the past of the gang its windows are read as
            group, _ = for_gang(group_spec, nodes)
        starts.append(conditioned_starts(group, spec.recent.at(group.gang)))
    weights = np.array([s.weight if s is not None else 0.0 for s in starts]) * spec.prior()
    if not weights.sum() > 0:
        hours = spec.recent.past_s / 3600
        raise InputError(spec.recent.source or "--recent-share", "recent",
                         f"no window of the market's long traces has {hours:g} h of capacity before it like the recent "
                         f"capacity ({spec.recent.describe()}): give a shorter --recent-past, or traces longer than it"
                         + (", or leave the state out" if spec.recent.state is not None else ""))
    return Conditioning(starts=tuple(starts), cumulative=_cumulative(weights))


def _cumulative(weights: np.ndarray) -> np.ndarray:
    """Weights as the cumulative shares a uniform number is looked up in (the last exactly 1)."""
    cumulative = np.cumsum(weights / weights.sum())
    cumulative[-1] = 1.0
    return cumulative


def groups_from_paths(paths: list[str], period: str = "yours") -> tuple[GroupSpec, ...]:
    """A user's traces as groups: a folder's *.json files one group each, a bundle one group, a file one."""
    out = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            files = traces_in(p)
            out += [GroupSpec(name=f"{p.name}/{_short(f.stem)}", period=period, paths=(str(f),),
                              region=region_of(f.stem)) for f in files]
        elif p.is_file():
            out.append(GroupSpec(name=_short(p.name.removesuffix(".gz").removesuffix(".json")), period=period,
                                 paths=(str(p),), region=region_of(p.name)))
        else:
            raise InputError(path, "file", "not found")
    return tuple(out)


def _short(stem: str) -> str:
    """us-east-1a_v100_1 -> us-east-1a: spot-traces name files zone_gpu_nodes."""
    return re.sub(r"_[a-z0-9]+_[0-9]+$", "", stem)
