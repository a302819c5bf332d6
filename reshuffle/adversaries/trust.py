"""A PS that chooses the trust parameters: it announces c and t (docs/protocol.md §11, "Who chooses").

The round parameters travel in ROUND_START, which the PS writes. ``announce-c`` announces
``c`` (default 0: no colluder at all) with the least t that validation allows, works with
one colluding participant, and has every honest dealer publish its shares to the most
complainers the announced cap t − 1 − c lets it answer. With its colluder's own share
that is t shares of every secret of every honest dealer, hence every upload unmasked.
It holds only if the PS links no honest participant to its model.
"""

from __future__ import annotations

from dataclasses import replace

from reshuffle.adversaries.base import register_adversary
from reshuffle.adversaries.ps import CuriousServer, LinkingPS
from reshuffle.protocol.params import RoundParams


@register_adversary("announce-c")
class AnnounceC(LinkingPS):
    """Announces ``c`` (None: the parameters it was configured with) and complains in t − 1 − c names.

    In a round in groups, every group's PS does the same with that group's parameters.
    """

    stopped_by = "each participant's own floor on c and t (§11): a ROUND_START below it is refused"
    dc_absent = ("no threshold: the DC-net round has no c or t to announce, and any number of colluders reads only "
                 "the honest members' sum (row dcnet-colluders)")

    def __init__(self, c: int | None = 0, colluders: tuple[int, ...] = (1,)) -> None:
        super().__init__()
        self.c = c
        self.colluders = tuple(colluders)

    def announced(self, params: RoundParams) -> RoundParams:
        """The parameters it announces: c as chosen, and the least t that validation allows."""
        if self.c is None:
            return params
        return replace(params, c=self.c, t=(params.N + self.c) // 2 + 1).validated()

    def make(self, params: RoundParams, *args, **kwargs) -> CuriousServer:
        return super().make(self.announced(params), *args, **kwargs)

    class server_class(CuriousServer):
        def _on_ot_request(self, st, sender, m):
            super()._on_ot_request(st, sender, m)
            # Complaints are the PS's to relay: it files them in the names of honest members, as many
            # as a dealer answers under the announced c.
            p, colluders = self.params, set(self.behaviour.colluders)
            cap = p.t - 1 - p.c
            for dealer in self.online[0]:
                if dealer in colluders:
                    continue
                names = [j for j in self.online[0] if j != dealer and j not in colluders][:cap]
                if names:
                    st.complaints[dealer] = set(names)
