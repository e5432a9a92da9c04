"""Accuracy and calibration of demand forecasts (paper 002 Sec. 4.6.1, Table 7, Fig. 10).

All metrics are in GPUs over every (tenant, hour) point, pooled:

* ``mae``, ``mse``, ``rmse`` of the mean;
* ``mape``: mean of ``|y - mu| / max(|y|, mape_floor)`` (a 1-GPU floor guards the zeros and the
  tenants of a fraction of a GPU);
* ``maqe_p`` (p-MAQE): the paper defines it only as "the average absolute error between
  predicted and actual values at a specific quantile level p"; it is read here as the mean
  quantile (pinball) loss of the p-quantile forecast ``q = upper(p)``:
  ``mean(max(p (y - q), (p - 1) (y - q)))``: the absolute error weighted p below the bound
  and 1 - p above it (so Table 7's 0.95-MAQE < 0.9-MAQE, as for a calibrated Gaussian);
* ``coverage_p``: fraction of points with ``y <= upper(p)`` (should be close to p).
"""

from __future__ import annotations

import numpy as np

from controlplane.core.errors import InvalidInput
from policies.forecast import DemandForecaster, Forecast

QUANTILES = (0.9, 0.95)


def pinball_loss(actual: np.ndarray, bound: np.ndarray, p: float) -> float:
    """Mean quantile loss of ``bound`` as the p-quantile of ``actual`` (p-MAQE)."""
    d = actual - bound
    return float(np.mean(np.maximum(p * d, (p - 1.0) * d)))


def coverage(actual: np.ndarray, bound: np.ndarray) -> float:
    """Fraction of points at or under the bound (ties count as covered)."""
    tol = 1e-9 * (1.0 + np.abs(bound))
    return float(np.mean(actual <= bound + tol))


def forecast_metrics(actual: np.ndarray, forecast: Forecast, mape_floor: float = 1.0) -> dict[str, float]:
    """MAE, MSE, RMSE, MAPE, p-MAQE (p = 0.9, 0.95) and coverage of upper(0.9 / 0.95)."""
    y = np.asarray(actual, dtype=float)
    if y.shape != forecast.mean.shape:
        raise InvalidInput("actual", f"shape {y.shape} != forecast {forecast.mean.shape}",
                           fix="compare the same tenants and hours")
    err = y - forecast.mean
    mse = float(np.mean(err**2))
    out = {"mae": float(np.mean(np.abs(err))), "mse": mse, "rmse": float(np.sqrt(mse)),
           "mape": float(np.mean(np.abs(err) / np.maximum(np.abs(y), mape_floor)))}
    for p in QUANTILES:
        q = forecast.upper(p)
        out[f"maqe_{p}"] = pinball_loss(y, q, p)
        out[f"coverage_{p}"] = coverage(y, q)
    return out


def rolling_forecast(model: DemandForecaster, series: np.ndarray, test_start: int, horizon: int,
                     start_hour: int = 0, stride: int | None = None) -> tuple[np.ndarray, Forecast]:
    """Forecast ``horizon`` hours from every origin ``test_start, test_start + stride, ...``.

    Origins run while the whole horizon fits in ``series``; the model sees ``series[:, :t]``
    (all of it, including test hours before the origin, never after). Returns the actuals and
    the forecasts joined along the hour axis, both ``[tenants, origins * horizon]``.
    """
    stride = stride or horizon
    t_end = series.shape[1]
    if not 0 < test_start <= t_end - horizon:
        raise InvalidInput("test_start", f"{test_start} leaves no {horizon}-hour test window in "
                           f"{t_end} hours", fix="start the test earlier")
    actual, parts = [], []
    for t in range(test_start, t_end - horizon + 1, stride):
        parts.append(model.predict(series[:, :t], horizon, start_hour))
        actual.append(series[:, t:t + horizon])
    return np.concatenate(actual, axis=1), Forecast.concat(parts)
