"""GFS GPU demand estimator (paper 002 Sec. 3.2): OrgLinear (Eq. 1-8) and the baselines.

Every forecaster takes an hourly history ``[tenants, T]`` (one row per tenant, always in the
same order) and forecasts the ``horizon`` hours after its end as a :class:`Forecast` (mean and
sigma per tenant and hour; ``upper(p)`` is the bound of Eq. 9). ``start_hour`` is the
hour-of-week of the history's column 0, with 0 = Monday 00:00 (see :data:`DLRM_START_HOUR`).

OrgLinear as built here (numpy/scipy only, analytic gradients, L-BFGS):

* Each training sample is a window of the last ``lookback`` hours of one tenant, *anchored* on
  its last value and scaled by the tenant's training scale (a RevIN-style normalisation, not
  in the paper; without it one shared linear head cannot serve tenants of 0.01 to 390 GPUs).
* Eq. 1-2: trend = moving average of kernel ``kernel`` with reflection padding, cycle = rest.
* Eq. 3: temporal context ``c_t`` = Emb(hour) + Emb(weekday) + Emb(holiday) (concatenated) of
  the first forecast hour; Eq. 4: tenant context ``c_o`` = Emb(tenant) + Emb(size bucket). The
  DLRM trace carries no business attributes besides the tenant and its size, so the attention
  of Eq. 4 over attribute embeddings is reduced to their concatenation.
* Eq. 5-6: mean = W_c'[chi_c + c_o + c_t] + b_c + W_t'[chi_t + c_o + c_t] + b_t (H outputs).
* Eq. 7: sigma = softplus(W_v'[v + c_o + c_t] + b_v) + sigma_min, where v = log(1 + |d chi|)
  are the (compressed) absolute hour-to-hour changes of the window. Read literally (W_v' on chi
  itself), a linear head answers a level shift anywhere in the window with a large sigma for
  the whole week the shift stays in view (the benchmark plot showed bands of +90 GPUs over a
  flat series); on the changes, each lag's weight says how much a jump that many hours ago
  predicts new ones, and the log keeps one huge jump from blowing sigma up linearly.
* Eq. 8 as printed (``-sum log phi((y - mu) / sigma)``) drops the ``log sigma`` Jacobian and
  would drive sigma to infinity; the Gaussian negative log-likelihood
  ``sum log sigma + (y - mu)^2 / (2 sigma^2)`` is minimised instead, plus an L2 penalty, by
  L-BFGS-B from a ridge least-squares warm start of the mean heads, on every
  ``train_stride``-th window for ``maxiter`` = 200 iterations. On the DLRM test week (4-h
  forecasts) stride 2 is no less accurate than 1 (at 300 iterations MAE 0.057 vs 0.064 GPUs)
  at half the cost; more iterations lower the training NLL but not the test error
  (200 / 300 / 600 iterations: MAE 0.059 / 0.057 / 0.058, 0.95-MAQE 0.035 / 0.035 / 0.037,
  coverage of upper(0.95) 0.970 / 0.975 / 0.973).
* Past ``horizon`` hours ``predict`` feeds its means back in (recursive); the sigma of those
  later blocks does not grow with the steps already taken, so ask for ``horizon`` >= the H of
  the quota (Eq. 9) when constructing the model.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from scipy import sparse
from scipy.optimize import minimize
from scipy.stats import norm

from controlplane.core.errors import InvalidInput

log = logging.getLogger(__name__)

HOURS_PER_WEEK = 168
#: Hour-of-week (0 = Monday 00:00) of hour 0 of the alibaba-dlrm trace. The trace has no
#: absolute timestamp; its deployment changes cluster in hours 10-19 of each day (working hours
#: if hour 0 is midnight) and are rare on days 0-1, 7-8, 14-15, 28-29, i.e. day 0 looks like a
#: Saturday. So hour 0 = Saturday 00:00 local time = hour-of-week 5 * 24.
DLRM_START_HOUR = 5 * 24


@dataclass(frozen=True)
class Forecast:
    """Per-tenant, per-hour demand distribution: Gaussian N(mean, sigma), or empirical.

    ``residuals`` (optional, ``[tenants, K]``, GPUs) replaces the Gaussian for ``upper``: the
    bound is then ``mean + quantile_p(residuals)`` (DLinear's residual quantiles).
    """

    mean: np.ndarray
    sigma: np.ndarray
    residuals: np.ndarray | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.mean.shape != self.sigma.shape or self.mean.ndim != 2:
            raise InvalidInput("forecast", f"mean {self.mean.shape} and sigma "
                               f"{self.sigma.shape} must both be [tenants, hours]",
                               fix="build Forecast from two arrays of the same 2-D shape")

    @property
    def horizon(self) -> int:
        return int(self.mean.shape[1])

    def upper(self, p: float) -> np.ndarray:
        """The p-quantile ICDF(p, mu, sigma) per tenant and hour (Sec. 3.3.1, Eq. 9)."""
        if not 0.0 < p < 1.0:
            raise InvalidInput("p", f"quantile level must be in (0, 1), got {p}", fix="use 0.9")
        if self.residuals is not None:
            q = np.quantile(self.residuals, p, axis=1)
            return self.mean + q[:, None]
        return self.mean + float(norm.ppf(p)) * self.sigma

    def head(self, hours: int) -> Forecast:
        """The first ``hours`` hours."""
        return Forecast(self.mean[:, :hours], self.sigma[:, :hours], self.residuals)

    @staticmethod
    def concat(parts: list[Forecast]) -> Forecast:
        """Join forecasts along the hour axis (e.g. the origins of a rolling evaluation)."""
        res = parts[0].residuals
        return Forecast(np.concatenate([f.mean for f in parts], axis=1),
                        np.concatenate([f.sigma for f in parts], axis=1), res)


@runtime_checkable
class DemandForecaster(Protocol):
    """What the quota allocator and the simulator call."""

    def fit(self, history: np.ndarray, start_hour: int = 0) -> DemandForecaster: ...

    def predict(self, history: np.ndarray, horizon: int, start_hour: int = 0) -> Forecast: ...


# --------------------------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------------------------
def _check_history(history: np.ndarray, min_hours: int, what: str = "history") -> np.ndarray:
    h = np.asarray(history, dtype=float)
    if h.ndim != 2:
        raise InvalidInput(what, f"must be [tenants, hours], got shape {h.shape}",
                           fix="pass TenantDemand.gpus or a slice of its columns")
    if h.shape[1] < min_hours:
        raise InvalidInput(what, f"has {h.shape[1]} hours, needs at least {min_hours}",
                           fix="pass a longer history or lower the lookback")
    if not np.all(np.isfinite(h)):
        raise InvalidInput(what, "contains NaN or inf", fix="fill missing hours with 0")
    return h


def _check_horizon(horizon: int) -> None:
    if horizon < 1:
        raise InvalidInput("horizon", f"must be >= 1, got {horizon}", fix="ask for 1+ hours")


def moving_average_matrix(length: int, kernel: int) -> np.ndarray:
    """Eq. 1's K_MA^d as a [length, length] matrix: centred mean, reflection padding."""
    return _moving_average_matrix(length, kernel).copy()


@functools.lru_cache(maxsize=16)
def _moving_average_matrix(length: int, kernel: int) -> np.ndarray:
    if kernel < 1 or kernel % 2 == 0:
        raise InvalidInput("kernel", f"must be odd and >= 1, got {kernel}", fix="use e.g. 25")
    half = kernel // 2
    a = np.zeros((length, length))
    for i in range(length):
        for k in range(i - half, i + half + 1):
            j = k
            while j < 0 or j >= length:  # reflect (no edge repeat) until inside
                j = -j if j < 0 else 2 * (length - 1) - j
            a[i, j] += 1.0 / kernel
    return a


def decompose(x: np.ndarray, kernel: int) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 1-2: (trend, cycle) of the rows of ``x`` (last axis = time)."""
    n = x.shape[-1]
    a = _moving_average_matrix(n, min(kernel, n if n % 2 else n - 1))
    trend = x @ a.T
    return trend, x - trend


def tenant_scale(history: np.ndarray) -> np.ndarray:
    """Per-tenant scale for normalisation: std + 1% of mean level + 1e-3 GPUs."""
    return history.std(axis=1) + 0.01 * np.abs(history).mean(axis=1) + 1e-3


def _windows(series: np.ndarray, lookback: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """All (input, target) windows of every row: X [tenants, n, L], Y [tenants, n, H]."""
    n = series.shape[1] - lookback - horizon + 1
    v = np.lib.stride_tricks.sliding_window_view(series, lookback + horizon, axis=1)[:, :n]
    return v[..., :lookback], v[..., lookback:]


# --------------------------------------------------------------------------------------------
# baselines
# --------------------------------------------------------------------------------------------
@dataclass
class LastWeekPeak:
    """GFS-e's production estimator: each tenant's peak over the last week, for every hour.

    A deterministic bound: ``sigma = 0`` so ``upper(p) = mean`` for every p.
    """

    window: int = HOURS_PER_WEEK

    def fit(self, history: np.ndarray, start_hour: int = 0) -> LastWeekPeak:
        _check_history(history, 1)
        return self

    def predict(self, history: np.ndarray, horizon: int, start_hour: int = 0) -> Forecast:
        h = _check_history(history, 1)
        _check_horizon(horizon)
        peak = h[:, -self.window:].max(axis=1)
        mean = np.repeat(peak[:, None], horizon, axis=1)
        return Forecast(mean, np.zeros_like(mean))


@dataclass
class SeasonalNaive:
    """Same hour one period ago (period 24 = last day, 168 = last week); sigma = std of the
    period-differences in the fit history (per tenant)."""

    period: int = 24
    sigma_: np.ndarray | None = None

    def fit(self, history: np.ndarray, start_hour: int = 0) -> SeasonalNaive:
        h = _check_history(history, self.period + 1)
        d = h[:, self.period:] - h[:, :-self.period]
        self.sigma_ = np.sqrt(np.mean(d**2, axis=1))
        return self

    def predict(self, history: np.ndarray, horizon: int, start_hour: int = 0) -> Forecast:
        h = _check_history(history, self.period)
        _check_horizon(horizon)
        if self.sigma_ is None or self.sigma_.shape[0] != h.shape[0]:
            raise InvalidInput("history", "call fit() first with the same tenants",
                               fix="fit on the training history")
        t = h.shape[1]
        idx = t - self.period + (np.arange(horizon) % self.period)
        mean = h[:, idx]
        return Forecast(mean, np.repeat(self.sigma_[:, None], horizon, axis=1))


@dataclass
class DLinear:
    """DLinear (Zeng et al., AAAI'23): trend/cycle decomposition + two linear heads, MSE loss.

    Shared across tenants on per-tenant standardised series (the published form), fitted in
    closed form (ridge least squares = the MSE optimum). The bound uses the tenant's in-sample
    residuals (GPUs) of the first ``horizon`` steps: ``upper(p) = mean + quantile_p(resid)``.
    """

    lookback: int = HOURS_PER_WEEK
    horizon: int = 24
    kernel: int = 25
    ridge: float = 1e-3
    anchor: bool = False
    w_: np.ndarray | None = None
    loc_: np.ndarray | None = None
    scale_: np.ndarray | None = None
    resid_: np.ndarray | None = None

    def _design(self, x: np.ndarray) -> np.ndarray:
        trend, cycle = decompose(x, self.kernel)
        ones = np.ones(x.shape[:-1] + (1,))
        return np.concatenate([trend, cycle, ones], axis=-1)

    def _norm(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        assert self.loc_ is not None and self.scale_ is not None
        base = x[..., -1:] if self.anchor else self.loc_.reshape((-1,) + (1,) * (x.ndim - 1))
        scale = self.scale_.reshape((-1,) + (1,) * (x.ndim - 1))
        return (x - base) / scale, base

    def fit(self, history: np.ndarray, start_hour: int = 0) -> DLinear:
        h = _check_history(history, self.lookback + self.horizon)
        self.loc_, self.scale_ = h.mean(axis=1), tenant_scale(h)
        x, y = _windows(h, self.lookback, self.horizon)
        xn, base = self._norm(x)
        yn = (y - base) / self.scale_[:, None, None]
        a = self._design(xn).reshape(-1, 2 * self.lookback + 1)
        b = yn.reshape(-1, self.horizon)
        reg = self.ridge * a.shape[0] * np.eye(a.shape[1])
        reg[-1, -1] = 0.0
        self.w_ = np.linalg.solve(a.T @ a + reg, a.T @ b)
        fitted = (a @ self.w_).reshape(yn.shape)
        self.resid_ = (yn - fitted) * self.scale_[:, None, None]  # [tenants, n, H] GPUs
        return self

    def predict(self, history: np.ndarray, horizon: int, start_hour: int = 0) -> Forecast:
        h = _check_history(history, self.lookback)
        _check_horizon(horizon)
        if self.w_ is None or self.resid_ is None or self.resid_.shape[0] != h.shape[0]:
            raise InvalidInput("history", "call fit() first with the same tenants",
                               fix="fit on the training history")
        out: list[np.ndarray] = []
        hist = h
        while sum(o.shape[1] for o in out) < horizon:
            xn, base = self._norm(hist[:, -self.lookback:])
            pred = self._design(xn) @ self.w_ * self.scale_[:, None] + base  # type: ignore[index]
            out.append(pred)
            hist = np.concatenate([hist, pred], axis=1)
        mean = np.concatenate(out, axis=1)[:, :horizon]
        steps = min(horizon, self.horizon)
        resid = self.resid_[:, :, :steps].reshape(h.shape[0], -1)
        sigma = np.repeat(resid.std(axis=1)[:, None], horizon, axis=1)
        return Forecast(mean, sigma, resid)


# --------------------------------------------------------------------------------------------
# OrgLinear
# --------------------------------------------------------------------------------------------
def _softplus(h: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, h)


def _sigmoid(h: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * h))


def _onehot(idx: np.ndarray, n: int) -> sparse.csr_matrix:
    m = idx.shape[0]
    return sparse.csr_matrix((np.ones(m), (np.arange(m), idx)), shape=(m, n))


@dataclass
class OrgBatch:
    """Training tensors of OrgLinear: normalised windows and the context indices per sample.

    ``design`` = [trend | cycle] (Eq. 1-2) of each normalised window, [N, 2L], and ``vol`` the
    log(1 + |change|) of its hours, [N, L] (float64; ``fit`` stores both in the model's ``dtype``:
    float32 halves the memory traffic that dominates an L-BFGS step).
    """

    design: np.ndarray  # [N, 2L]
    vol: np.ndarray  # [N, L] log(1 + |hourly change|) of the normalised window (sigma head)
    y: np.ndarray  # [N, H] normalised targets
    tenant: np.ndarray  # [N] int
    size: np.ndarray  # [N] int
    hour: np.ndarray  # [N] int
    weekday: np.ndarray  # [N] int
    holiday: np.ndarray  # [N] int
    onehots: list[sparse.csr_matrix] = field(default_factory=list)

    def build_onehots(self, sizes: tuple[int, ...]) -> None:
        cats = (self.tenant, self.size, self.hour, self.weekday, self.holiday)
        self.onehots = [_onehot(c, n) for c, n in zip(cats, sizes, strict=True)]


@dataclass
class OrgLinear:
    """OrgLinear (Eq. 1-8): decomposed linear mean heads + softplus sigma head, Gaussian MLE.

    ``sigma_input``: "changes" (default, log(1 + |hourly change|) of the window) or "levels"
    (the window itself, Eq. 7 as printed; kept for the ablation in ``benchmarks.forecast``).
    ``horizon`` is the number of hours the heads predict at once (H of Eq. 5-8); ``predict``
    goes further recursively (feeding its means back). ``holidays`` are day indices counted on
    the absolute hour ``start_hour + t`` (day 0 = the week of ``start_hour = 0``); none are
    known for the DLRM trace, so its holiday embedding stays at "workday".
    """

    lookback: int = HOURS_PER_WEEK
    horizon: int = 4
    kernel: int = 25
    d_tenant: int = 4
    d_time: int = 4
    size_buckets: int = 4
    l2: float = 1e-4
    sigma_min: float = 1e-3
    maxiter: int = 200
    train_stride: int = 2
    sigma_input: str = "changes"
    seed: int = 0
    dtype: str = "float32"
    holidays: frozenset[int] = frozenset()
    theta_: np.ndarray | None = None
    loc_: np.ndarray | None = None
    scale_: np.ndarray | None = None
    size_of_: np.ndarray | None = None
    n_tenants_: int = 0
    train_info_: dict[str, float] = field(default_factory=dict)

    # ---- parameter layout -----------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        return self.d_tenant * 2 + self.d_time * 3

    def _shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """Flat parameter layout.

        ``Win`` [2L, H]: Eq. 5's W_t (rows :L, on the trend) and W_c (rows L:, on the cycle).
        ``Wvol`` [L, H]: Eq. 7's W_v, on the window's absolute hourly changes (see the module
        note). ``Wctx`` [n_ctx, 2H] and ``b`` [2H]: the context rows and biases of the two mean
        heads act only through their sums W_t + W_c and b_t + b_c, so they are stored once
        (columns :H mean, H: sigma).
        """
        hh = self.horizon
        return [("Win", (2 * self.lookback, hh)), ("Wvol", (self.lookback, hh)),
                ("Wctx", (self.n_ctx, 2 * hh)),
                ("b", (2 * hh,)),
                ("Eo", (self.n_tenants_, self.d_tenant)), ("Es", (self.size_buckets, self.d_tenant)),
                ("Eh", (24, self.d_time)), ("Ew", (7, self.d_time)), ("Ehol", (2, self.d_time))]

    def _cat_sizes(self) -> tuple[int, ...]:
        return (self.n_tenants_, self.size_buckets, 24, 7, 2)

    def unpack(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """Named views into the flat parameter vector."""
        out, i = {}, 0
        for name, shape in self._shapes():
            n = int(np.prod(shape))
            out[name] = theta[i:i + n].reshape(shape)
            i += n
        return out

    def n_params(self) -> int:
        return sum(int(np.prod(s)) for _, s in self._shapes())

    def init_params(self) -> np.ndarray:
        """Zero heads, small random embeddings (a zero embedding would get zero gradient)."""
        rng = np.random.default_rng(self.seed)
        p = {name: np.zeros(shape) for name, shape in self._shapes()}
        for name in self._EMB:
            p[name] = rng.normal(0.0, 0.1, p[name].shape)
        p["b"][self.horizon:] = math.log(math.expm1(0.5))  # sigma starts at ~0.5 scales
        return np.concatenate([p[name].ravel() for name, _ in self._shapes()])

    def _warm_start(self, b: OrgBatch) -> np.ndarray:
        """Mean heads from ridge least squares (closed form), sigma bias from its residuals."""
        theta = self.init_params()
        p = self.unpack(theta)  # views into theta
        H = self.horizon
        d = b.design.astype(float)
        gram = d.T @ d
        # ridge relative to the data, with a floor: a tenant set with no demand at all (a GPU
        # pool its HP tasks never used) has an all-zero design and would be singular
        gram[np.diag_indices_from(gram)] += 1e-3 * np.trace(gram) / gram.shape[0] + 1e-9
        ybar = b.y.mean(axis=0)
        w = np.linalg.solve(gram, d.T @ (b.y - ybar))
        p["Win"][:], p["b"][:H] = w, ybar
        rms = np.sqrt(np.mean((b.y - ybar - d @ w) ** 2, axis=0))
        p["b"][H:] = np.log(np.expm1(np.maximum(rms, 2 * self.sigma_min)))
        return theta

    # ---- features --------------------------------------------------------------------------
    def _calendar(self, abs_hour: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Eq. 3's inputs: hour of day, weekday (0 = Monday), holiday flag."""
        day = abs_hour // 24
        hol = np.isin(day, np.fromiter(self.holidays, dtype=int, count=len(self.holidays)))
        return (abs_hour % 24).astype(int), (day % 7).astype(int), hol.astype(int)

    def _batch(self, x: np.ndarray, y: np.ndarray | None, origin_abs: np.ndarray) -> OrgBatch:
        """x [tenants, n, L] raw windows, origin_abs [n] absolute hour of the first target."""
        assert self.scale_ is not None and self.size_of_ is not None
        nt, n, _ = x.shape
        base = x[..., -1:]
        scale = self.scale_[:, None, None]
        xn = ((x - base) / scale).reshape(nt * n, -1)
        trend, cycle = decompose(xn, self.kernel)
        design = np.concatenate([trend, cycle], axis=1)
        if self.sigma_input == "levels":  # Eq. 7 read literally: W_v' on the window itself
            vol = xn
        else:
            vol = np.log1p(np.abs(np.diff(xn, axis=1, prepend=xn[:, :1])))
        yn = (np.zeros((nt * n, self.horizon)) if y is None
              else ((y - base) / scale).reshape(nt * n, -1))
        hour, wd, hol = self._calendar(np.tile(origin_abs, nt))
        tenant = np.repeat(np.arange(nt), n)
        return OrgBatch(design, vol, yn, tenant, self.size_of_[tenant], hour, wd, hol)

    _EMB = ("Eo", "Es", "Eh", "Ew", "Ehol")

    def _ctx_slices(self) -> list[tuple[str, int, int]]:
        """(embedding, first row, end row) of each context block in ``Wctx``."""
        dims = (self.d_tenant, self.d_tenant, self.d_time, self.d_time, self.d_time)
        ends = np.cumsum(dims)
        return [(n, int(e - d), int(e)) for n, d, e in zip(self._EMB, dims, ends, strict=True)]

    @staticmethod
    def _indices(b: OrgBatch) -> tuple[np.ndarray, ...]:
        return (b.tenant, b.size, b.hour, b.weekday, b.holiday)

    def _heads(self, p: dict[str, np.ndarray], b: OrgBatch) -> tuple[np.ndarray, ...]:
        """Eq. 5-7 on normalised data: (mu, h, sigma).

        The context term W'[c_o + c_t] is a sum over embeddings of (E_k W_k)[index_k]: a small
        table per category gathered per sample, never an [N, n_ctx] matrix.
        """
        H = self.horizon
        dt = b.design.dtype
        out = np.hstack([b.design @ p["Win"].astype(dt), b.vol @ p["Wvol"].astype(dt)])
        out = out.astype(float) + p["b"]
        for (name, lo, hi), idx in zip(self._ctx_slices(), self._indices(b), strict=True):
            out += (p[name] @ p["Wctx"][lo:hi])[idx]
        mu, h = out[:, :H], out[:, H:]
        return mu, h, _softplus(h) + self.sigma_min

    def forward(self, theta: np.ndarray, b: OrgBatch) -> tuple[np.ndarray, np.ndarray]:
        """Normalised (mu, sigma), each [N, H]."""
        mu, _, sig = self._heads(self.unpack(theta), b)
        return mu, sig

    def loss_and_grad(self, theta: np.ndarray, b: OrgBatch) -> tuple[float, np.ndarray]:
        """Mean Gaussian NLL (Eq. 8, with the log-sigma term) + L2, and its analytic gradient."""
        p = self.unpack(theta)
        mu, h, sig = self._heads(p, b)
        r = b.y - mu
        m = r.size
        z2 = (r / sig) ** 2
        loss = float(np.sum(np.log(sig) + 0.5 * z2) / m + 0.5 * math.log(2 * math.pi))
        loss += 0.5 * self.l2 * float(theta @ theta)
        gout = np.hstack([-(r / sig**2) / m, ((1.0 - z2) / sig) / m * _sigmoid(h)])  # [N, 2H]
        H, dt = self.horizon, b.design.dtype
        g = {"Win": (b.design.T @ gout[:, :H].astype(dt)).astype(float),
             "Wvol": (b.vol.T @ gout[:, H:].astype(dt)).astype(float),
             "Wctx": np.zeros_like(p["Wctx"]), "b": gout.sum(axis=0)}
        if not b.onehots:
            b.build_onehots(self._cat_sizes())
        for (name, lo, hi), oh in zip(self._ctx_slices(), b.onehots, strict=True):
            agg = oh.T @ gout  # [n_cat, 2H]: output gradient summed per category
            g[name] = agg @ p["Wctx"][lo:hi].T
            g["Wctx"][lo:hi] = p[name].T @ agg
        grad = np.concatenate([g[name].ravel() for name, _ in self._shapes()])
        return loss, grad + self.l2 * theta

    # ---- public API ------------------------------------------------------------------------
    def prepare(self, history: np.ndarray, start_hour: int = 0) -> OrgBatch:
        """Set the per-tenant normalisation from ``history`` and build its training batch."""
        if self.sigma_input not in ("changes", "levels"):
            raise InvalidInput("sigma_input", f"must be 'changes' or 'levels', got "
                               f"{self.sigma_input!r}", fix="use 'changes'")
        h = _check_history(history, self.lookback + self.horizon)
        self.n_tenants_ = h.shape[0]
        self.loc_, self.scale_ = h.mean(axis=1), tenant_scale(h)
        level = np.log10(np.abs(h).mean(axis=1) + 1e-3)
        edges = np.quantile(level, np.linspace(0, 1, self.size_buckets + 1)[1:-1])
        self.size_of_ = np.searchsorted(edges, level).astype(int)
        x, y = _windows(h, self.lookback, self.horizon)
        origin = start_hour + self.lookback + np.arange(x.shape[1])
        keep = slice(None, None, self.train_stride)
        batch = self._batch(x[:, keep], y[:, keep], origin[keep])
        batch.build_onehots(self._cat_sizes())
        return batch

    def fit(self, history: np.ndarray, start_hour: int = 0) -> OrgLinear:
        """Maximum-likelihood fit (Eq. 8) on every window of ``history`` with L-BFGS."""
        batch = self.prepare(history, start_hour)
        batch.design = batch.design.astype(self.dtype)
        batch.vol = batch.vol.astype(self.dtype)
        res = minimize(self.loss_and_grad, self._warm_start(batch), args=(batch,), jac=True,
                       method="L-BFGS-B", options={"maxiter": self.maxiter})
        self.theta_ = res.x
        self.train_info_ = {"loss": float(res.fun), "iterations": float(res.nit),
                            "samples": float(batch.y.shape[0])}
        log.info("OrgLinear fit: %d samples, %d iterations, NLL %.4f (%s)",
                 batch.y.shape[0], res.nit, res.fun, res.message)
        return self

    def predict(self, history: np.ndarray, horizon: int, start_hour: int = 0) -> Forecast:
        """Mean and sigma (GPUs) of the ``horizon`` hours after the history."""
        h = _check_history(history, self.lookback)
        _check_horizon(horizon)
        if self.theta_ is None or self.scale_ is None or h.shape[0] != self.n_tenants_:
            raise InvalidInput("history", f"call fit() first with the same {self.n_tenants_} "
                               f"tenants, got {h.shape[0]} rows", fix="fit on the training history")
        means: list[np.ndarray] = []
        sigmas: list[np.ndarray] = []
        hist = h
        while sum(m.shape[1] for m in means) < horizon:
            t = hist.shape[1]
            b = self._batch(hist[:, None, -self.lookback:], None, np.array([start_hour + t]))
            mu, sig = self.forward(self.theta_, b)
            means.append(hist[:, -1:] + mu * self.scale_[:, None])
            sigmas.append(sig * self.scale_[:, None])
            hist = np.concatenate([hist, means[-1]], axis=1)
        return Forecast(np.concatenate(means, axis=1)[:, :horizon],
                        np.concatenate(sigmas, axis=1)[:, :horizon])
