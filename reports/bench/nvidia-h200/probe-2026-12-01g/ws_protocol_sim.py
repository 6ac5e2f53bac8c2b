"""Model check of the barrier protocol of ``gluon_gemm.w8a8_mm_gluon_ws`` (the
warp-specialised ping-pong kernel; NOTE.md next to this file), run on a CPU: the
producer, the two consumers and the TMA unit as agents, scheduled in random order, with
PTX mbarrier semantics -- a barrier counts completed phases n; ``try_wait.parity p``
passes iff ``n & 1 != p`` (so a fresh barrier passes parity 1, and a barrier two phases
short of the awaited one passes too: parity aliasing); a phase completes when its
pending arrivals and expected transaction bytes are both zero; ``expect`` is an arrival
plus expected bytes; TMA loads complete in any order.

It checks, for every schedule tried: no deadlock (some agent can always move until all
are done); every wgmma reads the K step it was issued for, from issue until it is
retired (``warpgroup_mma_wait``), i.e. no slot is refilled under it and no consumer
passes a ready wait early; every load is consumed. Shapes: STAGES 2..6, K steps per
tile 1..9, 1..9 tiles per program.

``--no-order`` drops the ordering barrier: schedules then exist in which a consumer
passes a ready wait by parity aliasing (K steps < STAGES), the failure the module
docstring says the ordering barrier prevents.

Usage: python ws_protocol_sim.py [--no-order] [schedules per shape, default 200]
"""
import random
import sys


class Bar:
    """An mbarrier with count 1: completed phases, pending arrivals, expected bytes."""

    def __init__(self):
        self.n, self.pending, self.tx = 0, 1, 0

    def passes(self, parity):
        return (self.n & 1) != parity

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.n, self.pending = self.n + 1, 1

    def arrive(self, tx=0):
        assert self.pending == 1, "more arrivals than the count in one phase"
        self.pending, self.tx = 0, self.tx + tx
        self._maybe_complete()

    def complete_tx(self, tx):
        self.tx -= tx
        assert self.tx >= 0
        self._maybe_complete()


def run(stages, k_iters, tiles, rng, order=True):
    """One random schedule. Returns None if fine, else a description of the failure."""
    ready = [Bar() for _ in range(stages)]
    empty = [Bar() for _ in range(stages)]
    orderb = [Bar(), Bar()]
    slot_holds = [None] * stages   # the K step whose data a slot holds (None: being written)
    in_flight_tma = []             # (slot, g) issued, not landed
    total = tiles * k_iters

    def producer():
        g = 0
        while g < total:
            s = g % stages
            while not empty[s].passes(((g // stages) & 1) ^ 1):
                yield False
            ready[s].arrive(tx=2)       # expect: one arrival + both tiles' bytes
            slot_holds[s] = None        # the TMA unit overwrites the slot from now on
            in_flight_tma.append((s, g))
            g += 1
            yield True

    def consumer(wg):
        j = 0
        for local in range(wg, tiles, 2):
            g0 = local * k_iters
            if order:
                while not orderb[wg].passes((j & 1) ^ (1 - wg)):
                    yield False
            groups = []                 # wgmma groups in flight: (slot, g)
            for ki in range(k_iters):
                g = g0 + ki
                s = g % stages
                while not ready[s].passes((g // stages) & 1):
                    yield False
                if slot_holds[s] != g:
                    raise AssertionError(f"consumer {wg} read step {g} from slot {s} holding "
                                         f"{slot_holds[s]} (ready wait passed early)")
                groups.append((s, g))
                yield True
                while len(groups) > 1:  # warpgroup_mma_wait(1)
                    ps, pg = groups.pop(0)
                    if slot_holds[ps] != pg:
                        raise AssertionError(f"slot {ps} overwritten under step {pg}'s wgmma")
                if ki > 0:
                    empty[(g + stages - 1) % stages].arrive()
                yield True
            if order:
                orderb[1 - wg].arrive()
            for ps, pg in groups:       # warpgroup_mma_wait(0)
                if slot_holds[ps] != pg:
                    raise AssertionError(f"slot {ps} overwritten under step {pg}'s wgmma")
            empty[(g0 + k_iters - 1) % stages].arrive()
            j += 1
            yield True                  # the epilogue

    agents = {"producer": producer(), "c0": consumer(0), "c1": consumer(1)}
    done = set()
    stuck = 0
    while len(done) < 3 or in_flight_tma:
        choices = [a for a in agents if a not in done] + (["tma"] if in_flight_tma else [])
        who = rng.choice(choices)
        if who == "tma":  # any issued load may land next
            s, g = in_flight_tma.pop(rng.randrange(len(in_flight_tma)))
            slot_holds[s] = g
            ready[s].complete_tx(2)
            stuck = 0
            continue
        try:
            moved = next(agents[who])
        except StopIteration:
            done.add(who)
            stuck = 0
            continue
        except AssertionError as e:
            return str(e)
        stuck = 0 if moved else stuck + 1
        if stuck > 200 and not in_flight_tma:
            # 200 polls in a row without progress and no load in flight: (with 2-3
            # agents polled at random, a movable one would have moved) a deadlock
            return f"deadlock: done {sorted(done)}"
    # every step filled, consumed and released exactly once
    if sum(b.n for b in ready) != total or sum(b.n for b in empty) != total:
        return f"phases: ready {[b.n for b in ready]}, empty {[b.n for b in empty]}"
    return None


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    order = "--no-order" not in sys.argv
    per_shape = int(args[0]) if args else 200
    rng = random.Random(0)
    fails, runs = [], 0
    for stages in range(2, 7):
        for k_iters in range(1, 10):
            for tiles in range(1, 10):
                for _ in range(per_shape):
                    runs += 1
                    err = run(stages, k_iters, tiles, rng, order)
                    if err:
                        fails.append((stages, k_iters, tiles, err))
                        break
    print(f"ordering barrier: {'on' if order else 'off'}; {runs} schedules over "
          f"{5 * 9 * 9} (STAGES, K steps, tiles) shapes; failing shapes: {len(fails)}")
    for f in fails[:10]:
        print("  STAGES %d, K steps %d, tiles %d: %s" % f)


if __name__ == "__main__":
    main()
