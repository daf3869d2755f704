"""The spot market learned from what happened: censored fits of instance lives and capacity outages.

A spot instance's life ends in a preemption (an event) or in something else: the job finished, the
user cancelled it, it failed, the trace ended (right-censored: it would have lived at least that
long). Counting censored lives as preemptions biases the mean life low, the more so the more runs
finish; dropping them biases it too. So, as in reliability engineering:

- time to preemption: a two-parameter Weibull by censored maximum likelihood (scipy), with 95%
  Wald intervals on the log-parameters from the observed information, and the mean life's interval
  by the delta method;
- time until capacity comes back (an outage): exponential, as the simulator draws it; its censored
  MLE is total time over events, with the chi-square interval (time-censored: 2r+2 and 2r degrees).

Each figure carries the counts behind it; one from fewer than MIN_EVENTS events is marked thin.
Pure math: numpy and scipy, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize, special, stats

MIN_EVENTS = 10
SHAPE_BOUNDS = (0.05, 50.0)   # Weibull shapes searched; an optimum at either end is no estimate
Z95 = stats.norm.ppf(0.975)


@dataclass(frozen=True, slots=True)
class Span:
    """One observed duration: a life (up) or an outage (down); `event` False = right-censored."""

    duration_s: float
    event: bool
    ended: str = ""          # why it ended: preempted-notice, preempted, finished, cancelled, failed, trace-end
    source: str = ""


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class WeibullFit:
    shape: float
    scale_s: float
    mean_s: float
    events: int
    censored: int
    ci: dict[str, Interval] = field(default_factory=dict)   # shape, scale_s, mean_s
    shape_pinned: bool = False   # the data cannot fix the shape: pinned at 1 (exponential), no interval for it
    cov: tuple = ()              # covariance of (log shape, log scale) from the observed information

    @property
    def thin(self) -> bool:
        return self.events < MIN_EVENTS


@dataclass(frozen=True, slots=True)
class ExponentialFit:
    mean_s: float
    events: int
    censored: int
    ci: Interval | None = None

    @property
    def thin(self) -> bool:
        return self.events < MIN_EVENTS


def _weibull_nll(params: np.ndarray, t: np.ndarray, d: np.ndarray) -> float:
    """Negative log-likelihood in (log shape, log scale): events add log f, censored log S."""
    k, lam = math.exp(params[0]), math.exp(params[1])
    log_z = np.log(t / lam)
    with np.errstate(over="ignore"):
        z_k = np.exp(k * log_z)
        value = -(np.sum(math.log(k) - math.log(lam) + (k - 1.0) * log_z[d] - z_k[d]) - np.sum(z_k[~d]))
    return float(value) if np.isfinite(value) else math.inf


def _hessian(f, x: np.ndarray, step: float = 1e-4) -> np.ndarray:
    """Central finite-difference Hessian (2 x 2 here)."""
    n = len(x)
    h = np.zeros((n, n))
    for i in range(n):
        for j in range(i, n):
            e_i, e_j = np.eye(n)[i] * step, np.eye(n)[j] * step
            corners = f(x + e_i + e_j) - f(x + e_i - e_j) - f(x - e_i + e_j) + f(x - e_i - e_j)
            h[i, j] = h[j, i] = corners / (4 * step * step)
    return h


def fit_weibull(spans: list[Span]) -> WeibullFit | None:
    """Censored Weibull MLE of time to preemption; None without a single event."""
    t = np.array([max(s.duration_s, 1e-9) for s in spans], dtype=float)
    d = np.array([s.event for s in spans], dtype=bool)
    events = int(d.sum())
    if events == 0:
        return None
    scale0 = float(np.sum(t) / events)   # the exponential MLE: a start the optimiser cannot miss
    objective = lambda p: _weibull_nll(p, t, d)   # noqa: E731
    bounds = [(math.log(SHAPE_BOUNDS[0]), math.log(SHAPE_BOUNDS[1])),
              (math.log(t.min()) - 10.0, math.log(t.max()) + 10.0)]
    best = optimize.minimize(objective, np.array([0.0, math.log(scale0)]), method="Nelder-Mead", bounds=bounds,
                             options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 4000})
    log_k, log_lam = best.x
    if events < 2 or min(abs(log_k - b) for b in bounds[0]) < 1e-3:
        # One event, or a likelihood that grows without end (the longest life a preemption, say): no
        # shape is found. A reliability engineer pins it (Weibayes); 1 is the exponential.
        interval = _exponential_interval(float(np.sum(t)), events)
        return WeibullFit(shape=1.0, scale_s=scale0, mean_s=scale0, events=events, censored=len(spans) - events,
                          ci={"scale_s": interval, "mean_s": interval}, shape_pinned=True)
    k, lam = math.exp(log_k), math.exp(log_lam)
    mean = lam * math.gamma(1.0 + 1.0 / k)
    ci: dict[str, Interval] = {}
    found_cov: tuple = ()
    try:
        cov = np.linalg.inv(_hessian(objective, best.x))
        if np.all(np.isfinite(cov)) and cov[0, 0] > 0 and cov[1, 1] > 0:
            found_cov = tuple(map(tuple, cov.tolist()))
            se_k, se_lam = math.sqrt(cov[0, 0]), math.sqrt(cov[1, 1])
            ci["shape"] = Interval(math.exp(log_k - Z95 * se_k), math.exp(log_k + Z95 * se_k))
            ci["scale_s"] = Interval(math.exp(log_lam - Z95 * se_lam), math.exp(log_lam + Z95 * se_lam))
            # log mean = log lam + log Gamma(1 + 1/k): its gradient in (log k, log lam)
            grad = np.array([-special.digamma(1.0 + 1.0 / k) / k, 1.0])
            se_mean = math.sqrt(float(grad @ cov @ grad))
            ci["mean_s"] = Interval(mean * math.exp(-Z95 * se_mean), mean * math.exp(Z95 * se_mean))
    except np.linalg.LinAlgError:
        pass
    return WeibullFit(shape=k, scale_s=lam, mean_s=mean, events=events, censored=len(spans) - events, ci=ci,
                      cov=found_cov)


def fit_exponential(spans: list[Span]) -> ExponentialFit | None:
    """Censored exponential MLE of the mean (total time over events) with its chi-square interval."""
    events = sum(1 for s in spans if s.event)
    if events == 0:
        return None
    total = sum(s.duration_s for s in spans)
    return ExponentialFit(mean_s=total / events, events=events, censored=len(spans) - events,
                          ci=_exponential_interval(total, events))


def _exponential_interval(total_s: float, events: int) -> Interval:
    """95% interval of an exponential mean from time-censored data (chi-square, 2r+2 and 2r degrees)."""
    return Interval(2.0 * total_s / stats.chi2.ppf(0.975, 2 * events + 2),
                    2.0 * total_s / stats.chi2.ppf(0.025, 2 * events))


@dataclass(frozen=True, slots=True)
class OutageFit:
    """One family's censored fit of outage lengths: its parameters (log mean for the exponential;
    log shape and log scale for the Weibull; mu and log sigma for the lognormal), their covariance,
    the log-likelihood and AIC that compare the families."""

    family: str
    params: tuple[float, ...]
    cov: tuple
    loglik: float
    aic: float
    mean_s: float
    events: int
    censored: int

    @property
    def shape(self) -> float:
        """What the simulator's HazardModel calls `wait_shape`: the Weibull's shape, the lognormal's sigma."""
        if self.family == "exponential":
            return 1.0
        return math.exp(self.params[0] if self.family == "weibull" else self.params[1])


def family_mean_s(family: str, params) -> float:
    """The mean of an outage family at its parameters (see OutageFit)."""
    if family == "exponential":
        return math.exp(params[0])
    if family == "weibull":
        return math.exp(params[1]) * math.gamma(1.0 + 1.0 / math.exp(params[0]))
    return math.exp(params[0] + 0.5 * math.exp(2.0 * params[1]))


def _family_nll(family: str, params: np.ndarray, t: np.ndarray, d: np.ndarray) -> float:
    """Censored negative log-likelihood: events add log f, censored log S (closed forms: thousands of
    calls per fit)."""
    log_t = np.log(t)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if family == "exponential":
            log_m = params[0]
            logpdf = -log_m - t[d] / math.exp(log_m)
            logsf = -t[~d] / math.exp(log_m)
        elif family == "weibull":
            k, log_lam = math.exp(params[0]), params[1]
            z = np.exp(k * (log_t - log_lam))
            logpdf = math.log(k) - log_lam + (k - 1.0) * (log_t[d] - log_lam) - z[d]
            logsf = -z[~d]
        else:
            mu, sigma = params[0], math.exp(params[1])
            z = (log_t - mu) / sigma
            logpdf = -log_t[d] - math.log(sigma * math.sqrt(2.0 * math.pi)) - 0.5 * z[d] ** 2
            logsf = special.log_ndtr(-z[~d])
        value = -(np.sum(logpdf) + np.sum(logsf))
    return float(value) if np.isfinite(value) else math.inf


def fit_outage_families(spans: list[Span]) -> list[OutageFit]:
    """Exponential, Weibull and lognormal fits of outage lengths by censored maximum likelihood, best
    (lowest AIC) first; empty without a single ended outage."""
    t = np.array([max(s.duration_s, 1e-9) for s in spans], dtype=float)
    d = np.array([s.event for s in spans], dtype=bool)
    events = int(d.sum())
    if events == 0:
        return []
    mean0 = float(np.sum(t) / events)
    logs = np.log(t[d])
    starts = {"exponential": np.array([math.log(mean0)]),
              "weibull": np.array([0.0, math.log(mean0)]),
              "lognormal": np.array([float(logs.mean()), math.log(max(float(logs.std()), 0.05))])}
    log_t = (math.log(t.min()) - 10.0, math.log(t.max()) + 10.0)
    shape_bounds = (math.log(SHAPE_BOUNDS[0]), math.log(SHAPE_BOUNDS[1]))
    bounds = {"exponential": [log_t], "weibull": [shape_bounds, log_t],
              "lognormal": [log_t, (math.log(0.01), math.log(20.0))]}   # all outages alike: sigma stops at 0.01
    fits = []
    for family, x0 in starts.items():
        objective = lambda p, family=family: _family_nll(family, p, t, d)   # noqa: E731
        if events < 2 and family != "exponential":
            continue
        x0 = np.clip(x0, [b[0] for b in bounds[family]], [b[1] for b in bounds[family]])
        best = optimize.minimize(objective, x0, method="Nelder-Mead", bounds=bounds[family],
                                 options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 4000})
        if not np.isfinite(best.fun):
            continue
        cov: tuple = ()
        try:
            found = np.linalg.inv(_hessian(objective, best.x)) if len(x0) > 1 else \
                np.array([[1.0 / max(events, 1)]])   # the exponential's log mean: variance 1/r
            if np.all(np.isfinite(found)) and np.all(np.diag(found) > 0):
                cov = tuple(map(tuple, found.tolist()))
        except np.linalg.LinAlgError:
            pass
        params = tuple(float(v) for v in best.x)
        fits.append(OutageFit(family=family, params=params, cov=cov, loglik=-float(best.fun),
                              aic=2.0 * len(x0) + 2.0 * float(best.fun), mean_s=family_mean_s(family, params),
                              events=events, censored=len(spans) - events))
    return sorted(fits, key=lambda f: f.aic)


@dataclass(frozen=True, slots=True)
class MeanLife:
    """The mean time to preemption, and how it was found: `kaplan-meier` (the area under the
    censoring-aware survival curve, when the longest life ended in a preemption so the curve reaches
    0) or `weibull` (the fitted Weibull's mean, when the longest life was censored: the curve's area
    would stop short)."""

    mean_s: float
    ci: Interval | None
    method: str


def kaplan_meier_mean(spans: list[Span]) -> MeanLife | None:
    """The Kaplan-Meier mean with its Greenwood-type variance (Klein & Moeschberger 4.5), or None
    when the longest life is censored."""
    if not spans:
        return None
    t = np.array([s.duration_s for s in spans], dtype=float)
    d = np.array([s.event for s in spans], dtype=bool)
    longest = np.max(t)
    if not d[t == longest].any():
        return None
    times = np.unique(t[d])
    at_risk = np.array([np.sum(t >= u) for u in times], dtype=float)
    deaths = np.array([np.sum((t == u) & d) for u in times], dtype=float)
    survival = np.cumprod(1.0 - deaths / at_risk)
    edges = np.concatenate([[0.0], times])
    heights = np.concatenate([[1.0], survival[:-1]])
    mean = float(np.sum(heights * np.diff(edges)))
    # area under the curve from each event time to the end
    pieces = survival[:-1] * np.diff(times) if len(times) > 1 else np.array([])
    area_after = np.concatenate([np.cumsum(pieces[::-1])[::-1], [0.0]])
    alive_after = at_risk - deaths
    ok = alive_after > 0
    variance = float(np.sum(area_after[ok] ** 2 * deaths[ok] / (at_risk[ok] * alive_after[ok])))
    se = math.sqrt(variance)
    return MeanLife(mean, Interval(max(mean - Z95 * se, 0.0), mean + Z95 * se), "kaplan-meier")


def mean_life(spans: list[Span], weibull: WeibullFit | None) -> MeanLife | None:
    """Kaplan-Meier's mean where the data reach the end of the survival curve, else the Weibull's."""
    found = kaplan_meier_mean(spans)
    if found is not None or weibull is None:
        return found
    return MeanLife(weibull.mean_s, weibull.ci.get("mean_s"), "weibull")


def naive_mean_s(spans: list[Span]) -> float | None:
    """The mean life if every life ended in a preemption: what a fit that ignores censoring says."""
    return float(np.mean([s.duration_s for s in spans])) if spans else None


# -- observations ------------------------------------------------------------------------------
def trace_spans(ticks: list[int], gap_s: float, source: str = "") -> tuple[list[Span], list[Span]]:
    """(lives, outages) of a 1-node capacity trace (0 = available). A stretch that reaches the
    trace's end is censored; one that starts at its first tick is left-truncated (its age at the
    trace's start is unknown), and is left out."""
    lives: list[Span] = []
    outages: list[Span] = []
    start, value = 0, ticks[0]
    for index in range(1, len(ticks) + 1):
        if index < len(ticks) and ticks[index] == value:
            continue
        ended_by_trace = index == len(ticks)
        if start > 0:
            span = Span((index - start) * gap_s, event=not ended_by_trace,
                        ended="trace-end" if ended_by_trace else ("preempted" if value == 0 else "capacity-back"),
                        source=source)
            (lives if value == 0 else outages).append(span)
        if index < len(ticks):
            start, value = index, ticks[index]
    return lives, outages


@dataclass(frozen=True, slots=True)
class MarketFit:
    """One offering's (or label's) spot market, fitted."""

    offering: str
    lives: WeibullFit | None
    mean_up: MeanLife | None
    outages: ExponentialFit | None
    naive_mean_up_s: float | None
    sources: tuple[str, ...]
    ended: dict[str, int]       # how the lives ended, counted


def fit_market(offering: str, lives: list[Span], outages: list[Span]) -> MarketFit:
    ended: dict[str, int] = {}
    for span in lives:
        ended[span.ended] = ended.get(span.ended, 0) + 1
    weibull = fit_weibull(lives)
    return MarketFit(offering=offering, lives=weibull, mean_up=mean_life(lives, weibull), outages=fit_exponential(outages),
                     naive_mean_up_s=naive_mean_s(lives), sources=tuple(sorted({s.source for s in lives + outages})),
                     ended=ended)


# -- results -----------------------------------------------------------------------------------
def _pair(interval: Interval | None) -> list[float] | None:
    return None if interval is None else [float(interval.low), float(interval.high)]


def fit_record(fit: MarketFit) -> dict:
    """One offering's figures (the JSON of `costsim calibrate --market`): each with its 95% interval
    under `ci`, the counts behind it, and `thin` naming the figures from fewer than MIN_EVENTS events."""
    w, up, out = fit.lives, fit.mean_up, fit.outages
    thin = []
    if w is None or w.thin:
        thin += ["weibull_shape", "weibull_scale_s", "mean_up_s"]
    if out is None or out.thin:
        thin.append("mean_outage_s")
    return {
        "offering": fit.offering,
        "weibull_shape": w.shape if w else None, "weibull_scale_s": w.scale_s if w else None,
        "weibull_shape_pinned": w.shape_pinned if w else None,
        "mean_up_s": up.mean_s if up else None, "mean_up_method": up.method if up else None,
        "mean_outage_s": out.mean_s if out else None,
        "preemptions": w.events if w else 0,
        "censored": w.censored if w else sum(fit.ended.values()),
        "outages": out.events if out else 0, "outages_censored": out.censored if out else 0,
        "naive_mean_up_s": fit.naive_mean_up_s,
        "ci": {"weibull_shape": _pair(w.ci.get("shape")) if w else None,
               "weibull_scale_s": _pair(w.ci.get("scale_s")) if w else None,
               "mean_up_s": _pair(up.ci) if up else None,
               "mean_outage_s": _pair(out.ci) if out else None},
        "thin": thin, "ended": dict(sorted(fit.ended.items())), "sources": list(fit.sources),
    }


def model_document(records: list[dict], read_date: str, command: str) -> dict:
    """A spot model file (the format of data/catalog/spot_models.yaml) from fitted records, with the
    intervals and counts beside each model so that a plan can test its choice against them."""
    models = {}
    for r in records:
        if r["mean_up_s"] is None:
            continue
        entry: dict[str, Any] = {"mtbf": f"{r['mean_up_s']:.6g}s"}
        if not r["weibull_shape_pinned"]:   # a pinned shape is no finding: the catalog's stays
            entry["weibull_shape"] = round(r["weibull_shape"], 4)
        if r["mean_outage_s"] is not None:
            entry["wait_mean"] = f"{r['mean_outage_s']:.6g}s"
        entry["fitted"] = {"preemptions": r["preemptions"], "censored": r["censored"], "outages": r["outages"],
                           "mean_up_method": r["mean_up_method"], "thin": r["thin"],
                           "ci": {"mtbf_s": r["ci"]["mean_up_s"], "wait_mean_s": r["ci"]["mean_outage_s"],
                                  "weibull_shape": r["ci"]["weibull_shape"]}}
        models[r["offering"]] = entry
    return {"read_date": read_date, "source": command, "models": models}
