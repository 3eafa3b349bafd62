"""Interop with Google's ``dp_accounting``: our events to and from its ``DpEvent``.

A user who accounts for other mechanisms with ``dp_accounting`` composes our releases with
them in one accountant through :func:`to_dp_event`, and brings a ``DpEvent`` into our
:class:`~shuffledp.accounting.composition.Accountant` through :func:`from_dp_event`.
``dp_accounting`` is an optional dependency (``pip install "shuffledp[interop]"``); it is
imported only when one of the two functions is called.

Soundness. A ``DpEvent`` stands for a dominating pair that ``dp_accounting``'s accountants
compute themselves, so a conversion is made only where the pair on the other side is the
same pair (or, from ``dp_accounting`` to us, a pair that dominates it):

* a pure epsilon-DP pair -- ``EpsDelta(epsilon, delta=0)``, and ``DiscreteLaplace`` with
  sensitivity 1, whose privacy loss takes only the values +-t, so its pair *is* the pure
  pair of epsilon = t -- is the pair of binary randomized response
  (``RandomizedResponseDpEvent(noise_parameter=2 / (1 + e^eps), num_buckets=2)``: the
  output equals the input with probability 1 - p/2 = e^eps / (1 + e^eps)), which is the
  dominating pair of every eps-DP mechanism ([KOV15]_ Thm 2.1). ``dp_accounting``
  accounts for randomized response only under ``REPLACE_ONE`` (or ``REPLACE_SPECIAL``, a
  different pair), so only events stated for :attr:`Neighbour.REPLACE_ONE` are mapped
  (use ``NeighboringRelation.REPLACE_ONE`` in its accountant); an event stated for
  add/remove or zero-out neighbours is refused, because ``dp_accounting`` would read its
  pair as a replace-one pair;
* ``EpsDelta(0, 0)`` (both distributions equal) is ``NoOpDpEvent``, for every relation;
* :class:`Sequential` is ``ComposedDpEvent`` (adaptive composition on both sides,
  [ZDW22]_ Thm 10), and so is an :class:`Accountant`, an entry run k times as k copies:
  not as ``SelfComposedDpEvent``, because ``dp_accounting`` 0.6.0's ``PLDAccountant``
  composes a ``RandomizedResponseDpEvent`` once whatever its count (in a
  ``SelfComposedDpEvent`` or ``compose(event, count)``), which would under-count the
  repetitions; ``SelfComposedDpEvent`` is read back (:func:`from_dp_event`) as ``count``
  copies;
* every other event -- a delta > 0 pair, shuffled LDP, shuffled k-RR, the discrete
  Gaussian, ``Parallel``, a ``PolyaSum`` with tv > 0, a ``DiscreteLaplace`` of sensitivity
  > 1 -- has a dominating pair ``dp_accounting`` cannot express; it is refused with a
  ValueError naming the event and the reason, or becomes ``UnsupportedDpEvent`` when the
  caller passes ``unsupported="event"`` (its accountants then refuse it in turn).

Continuous Laplace and Gaussian events are not converted from ``dp_accounting``: their
privacy loss is continuous, and :mod:`shuffledp.accounting.pld` computes only PLDs whose
numerical error is proven; rather than approximate, :func:`from_dp_event` refuses them.

References
----------
.. [KOV15] Kairouz et al. (2015), "The Composition Theorem for Differential Privacy",
   Thm 2.1 -- full entry in docs/references.md
.. [ZDW22] Zhu et al. (2022), "Optimal Accounting of Differential Privacy via
   Characteristic Function", Thm 10 -- full entry in docs/references.md
"""

from __future__ import annotations

import math
from typing import Any

from shuffledp.accounting.composition import Accountant
from shuffledp.accounting.events import (
    DiscreteLaplace,
    EpsDelta,
    PolyaSum,
    PrivacyEvent,
    Sequential,
)
from shuffledp.accounting.guarantee import Neighbour

__all__ = ["from_dp_event", "to_dp_event"]

_EXTRA = ('dp_accounting is not installed: the interop with dp_accounting needs the '
          '"interop" extra (pip install "shuffledp[interop]", or pip install '
          '"dp-accounting>=0.6.0")')

#: largest epsilon mapped (2 / (1 + e^eps) underflows the double range beyond ~709)
_MAX_EPS = 700.0


def _dp() -> Any:
    try:
        import dp_accounting
    except ImportError as exc:
        raise ImportError(_EXTRA) from exc
    return dp_accounting


def _rr_noise(eps: float) -> float:
    """Binary RR's noise parameter p = 2 / (1 + e^eps) of the pure eps pair."""
    return 2.0 / (1.0 + math.exp(eps))


def _refuse(event: PrivacyEvent, why: str, unsupported: str) -> Any:
    if unsupported == "event":
        return _dp().UnsupportedDpEvent()
    raise ValueError(f"cannot convert {event.describe()} to a dp_accounting DpEvent: {why}")


def _pure(event: PrivacyEvent, eps: float, unsupported: str) -> Any:
    dp = _dp()
    if eps == 0.0:
        return dp.NoOpDpEvent()
    if event.neighbour is not Neighbour.REPLACE_ONE:
        return _refuse(event, (
            f"its pure pair is stated for neighbour={event.neighbour.token!r}, and "
            "dp_accounting accounts for this pair (randomized response) only under "
            "REPLACE_ONE; restate the guarantee for replace-one neighbours (e.g. an "
            "add/remove eps-DP release is 2 eps-DP under replace-one)"), unsupported)
    if eps > _MAX_EPS:
        return _refuse(event, f"epsilon={eps:g} > {_MAX_EPS:g}: the randomized-response "
                              "noise parameter 2 / (1 + e^eps) underflows", unsupported)
    return dp.RandomizedResponseDpEvent(noise_parameter=_rr_noise(eps), num_buckets=2)


def to_dp_event(event: PrivacyEvent | Accountant, *, unsupported: str = "raise") -> Any:
    """The ``dp_accounting`` ``DpEvent`` whose pair is exactly the event's dominating pair.

    Parameters
    ----------
    event : PrivacyEvent or Accountant
        The release to convert. An :class:`Accountant` becomes the composition of its
        entries (an entry run k times as k copies, see the module notes).
    unsupported : {"raise", "event"}
        What an event without an exact ``dp_accounting`` counterpart becomes: a ValueError
        (default) or ``dp_accounting.UnsupportedDpEvent()``.

    Returns
    -------
    dp_accounting.DpEvent
        ``RandomizedResponseDpEvent`` (2 buckets) for a pure pair stated for replace-one
        neighbours, ``NoOpDpEvent`` for epsilon = 0, ``ComposedDpEvent`` for
        compositions (see the module notes).

    Raises
    ------
    ImportError
        dp_accounting is not installed (the ``interop`` extra).
    TypeError
        ``event`` is neither a PrivacyEvent nor an Accountant.
    ValueError
        ``unsupported`` is not "raise" or "event"; the accountant is empty; or (with
        ``unsupported="raise"``) the event's dominating pair has no exact ``dp_accounting``
        counterpart: the message names the event and the reason.

    References
    ----------
    [KOV15]_ Thm 2.1 (the pure pair dominates every eps-DP mechanism); [ZDW22]_ Thm 10
    (dominating pairs compose).
    """
    if unsupported not in ("raise", "event"):
        raise ValueError(f"unsupported must be 'raise' or 'event', got unsupported={unsupported!r}")
    dp = _dp()
    if isinstance(event, Accountant):
        if not event.events:
            raise ValueError("cannot convert an empty Accountant: it holds no event")
        parts = []
        for e, k in event.events:
            one = to_dp_event(e, unsupported=unsupported)
            # k copies, not SelfComposedDpEvent(one, k): dp_accounting 0.6.0's
            # PLDAccountant composes a RandomizedResponseDpEvent once whatever the count
            # (it would under-count the repetitions)
            parts.extend([one] * k)
        return parts[0] if len(parts) == 1 else dp.ComposedDpEvent(events=parts)
    if not isinstance(event, PrivacyEvent):
        raise TypeError(f"event must be a PrivacyEvent or an Accountant, got {event!r}")
    if isinstance(event, Sequential):
        return dp.ComposedDpEvent(
            events=[to_dp_event(e, unsupported=unsupported) for e in event.steps])
    if isinstance(event, DiscreteLaplace):
        if event.sensitivity != 1:
            return _refuse(event, (
                f"with sensitivity {event.sensitivity} its privacy loss takes "
                f"{event.sensitivity + 1} values, a pair dp_accounting has no event for "
                "(only sensitivity 1 is the pure pair)"), unsupported)
        return _pure(event, event.parameter, unsupported)
    if isinstance(event, EpsDelta):
        if event.guarantee_notion != "approximate":
            return _refuse(event, f"its guarantee is {event.guarantee_notion} (metric DP), "
                                  "which dp_accounting does not express", unsupported)
        if event.delta > 0:
            return _refuse(event, (
                f"delta={event.delta:g} > 0: its dominating pair (the (eps, delta) pair of "
                "Kairouz et al.) has no dp_accounting event"), unsupported)
        return _pure(event, event.epsilon, unsupported)
    if isinstance(event, PolyaSum) and event.delta == 0.0:
        why = ("its exact pair (the level discrete Laplace pairs) has no dp_accounting "
               "event")
    elif isinstance(event, PolyaSum):
        why = f"tv > 0: its pair carries an infinity mass (delta={event.delta:g})"
    else:
        why = (f"dp_accounting has no event for the dominating pair of a {event.kind} "
               "event")
    return _refuse(event, why, unsupported)


def from_dp_event(dp_event: Any, *, neighbour: Neighbour | str = Neighbour.REPLACE_ONE,
                  label: str = "") -> PrivacyEvent:
    """Our event with the same dominating pair as a ``dp_accounting`` ``DpEvent``.

    Parameters
    ----------
    dp_event : dp_accounting.DpEvent
        ``RandomizedResponseDpEvent`` with 1 or 2 buckets, ``NoOpDpEvent``,
        ``ComposedDpEvent`` or ``SelfComposedDpEvent`` of these.
    neighbour : Neighbour or str
        The relation the result is stated for. ``dp_accounting`` reads randomized response
        as a replace-one pair, so a non-trivial randomized response needs "replace"
        (the default); ``NoOpDpEvent`` holds for every relation.
    label : str
        Label of the result (default: the ``DpEvent``'s class name).

    Returns
    -------
    PrivacyEvent
        ``EpsDelta(epsilon, delta=0)`` for randomized response (epsilon =
        ln((2 - p) / p)) and ``EpsDelta(0, 0)`` for a no-op, :class:`Sequential` for a
        composition (a self-composition as ``count`` copies of its event).

    Raises
    ------
    ImportError
        dp_accounting is not installed (the ``interop`` extra).
    ValueError
        ``neighbour`` is not a relation; or the event has no exact counterpart here: a
        continuous Laplace or Gaussian event (a continuous privacy loss, whose PLD
        :mod:`shuffledp.accounting.pld` cannot compute with a proven error), randomized
        response over more than 2 buckets or with noise parameter 0 (not private),
        randomized response under a neighbour other than replace-one, an empty
        composition, and every other ``DpEvent``: the message names it.

    References
    ----------
    [KOV15]_ Thm 2.1 (binary randomized response is the pure eps pair); [ZDW22]_ Thm 10.
    """
    dp = _dp()
    nb = Neighbour.parse(neighbour)
    name = type(dp_event).__name__
    lab = label or name

    def refuse(why: str) -> ValueError:
        return ValueError(f"cannot convert {name} ({dp_event!r}) to a shuffledp event: {why}")

    if isinstance(dp_event, dp.NoOpDpEvent):
        return EpsDelta(epsilon=0.0, delta=0.0, neighbour=nb, label=lab)
    if isinstance(dp_event, dp.RandomizedResponseDpEvent):
        p, k = float(dp_event.noise_parameter), int(dp_event.num_buckets)
        if k == 1:
            return EpsDelta(epsilon=0.0, delta=0.0, neighbour=nb, label=lab)
        if not 0.0 <= p <= 1.0:
            raise refuse(f"noise_parameter must be in [0, 1], got {p!r}")
        if p == 0.0:
            raise refuse("noise_parameter 0 releases the input: the mechanism is not private")
        if k != 2:
            raise refuse(f"randomized response over {k} buckets has three privacy losses "
                         "(+-L and 0), not a pure pair; only 2 buckets convert exactly")
        if nb is not Neighbour.REPLACE_ONE:
            raise refuse("dp_accounting reads randomized response as a replace-one pair, "
                         f"got neighbour={nb.token!r}")
        # P(out = in) = 1 - p/2, P(out != in) = p/2: eps = ln((2 - p) / p)
        eps = math.log1p(2.0 * (1.0 - p) / p)
        return EpsDelta(epsilon=eps, delta=0.0, neighbour=nb, label=lab)
    if isinstance(dp_event, dp.ComposedDpEvent):
        if not dp_event.events:
            raise refuse("an empty composition")
        return Sequential(steps=tuple(from_dp_event(e, neighbour=nb) for e in dp_event.events),
                          neighbour=nb, label=lab)
    if isinstance(dp_event, dp.SelfComposedDpEvent):
        count = int(dp_event.count)
        if count < 1:
            raise refuse(f"count must be >= 1, got {count}")
        one = from_dp_event(dp_event.event, neighbour=nb)
        return Sequential(steps=(one,) * count, neighbour=nb, label=lab)
    if isinstance(dp_event, (dp.LaplaceDpEvent, dp.GaussianDpEvent)):
        raise refuse("its privacy loss is continuous, and shuffledp computes only PLDs "
                     "whose numerical error is proven (no continuous laws); account for it "
                     "in dp_accounting, with to_dp_event for our releases")
    raise refuse("dp_accounting event type without an exact shuffledp counterpart")
