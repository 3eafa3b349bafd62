"""The one base class of the package's refusals.

A release, or a protocol step, whose safety or correctness cannot be proven from what the
party holds is *refused*: the party raises a :class:`Refused` carrying the reason and outputs
nothing, rather than reporting a result with a caveat. Examples: an analyzer whose mixed
batch misses messages or has fewer than n_min users (the noise was calibrated for more), a
federated shard with fewer survivors than its noise assumes, a secure-aggregation client
asked to reveal both secrets of one peer, a server with fewer than t clients left, a
release that would take a privacy ledger past its total, a ledger whose log does not verify
or whose lock another process holds.

Every refusal type of the package subclasses :class:`Refused`:

======================================================  ========================================
:class:`shuffledp.analyzers.heatmap.modular.ReleaseRefused`  the heatmap analyzer (also a
                                                        ``RuntimeError``, its base before 0.2)
:class:`shuffledp.analyzers.heatmap.release_ledger.RoundAlreadyReleased`
                                                        a second release of a round the
                                                        analyzer's release ledger holds
:class:`shuffledp.analyzers.heatmap.release_ledger.LedgerError`
                                                        a release ledger that cannot be read,
                                                        verified or written (fail closed)
:class:`shuffledp.analyzers.federated.FederatedRefused`  a federated round's release
:class:`shuffledp.secagg.SecAggRefused`                 an honest secure-aggregation client
:class:`shuffledp.secagg.SecAggAborted`                 the secure-aggregation server
:class:`shuffledp.accounting.ledger.BudgetExceeded`     a privacy-budget ledger
:class:`shuffledp.accounting.ledger.LegacyLedger`       a ledger in the format before hash
                                                        chaining (convert it first)
:class:`shuffledp.safe_io.LockBusy`                     a lock (a ledger's) held by another
                                                        process past the wait agreed
:class:`shuffledp.safe_io.TamperedLog`                  a hash-chained log (a ledger's) that
                                                        does not verify
======================================================  ========================================

:class:`Refused` subclasses ``ValueError``, so callers that caught the individual types as
``ValueError`` keep working; ``except shuffledp.Refused`` catches all of them and nothing
else (an invalid argument is a plain ``ValueError``/``TypeError``, a malformed batch a
:class:`shuffledp.protocol.wire.WireError`). The command line prints a refusal as one line,
``Error: <reason>``, and exits with status 1.

The HTTP client's :class:`shuffledp.serve.client.Refused` is not one of them: it reports a
remote service's error answer (a 4xx, or a 5xx after retries), not a decision of this
process.
"""

from __future__ import annotations


class Refused(ValueError):
    """A release or step refused because it cannot be proven safe or correct.

    Raised instead of returning anything; the message names the reason (which check failed,
    with the numbers). See the module docstring for the subclasses.
    """


__all__ = ["Refused"]
