"""User-level metric DP, server side: PrivEMDItemWise (:mod:`.itemwise`), PrivEMDLinear
(:mod:`.linear`), FreqEstLocal (:mod:`.freq`), BoundedEMDReduction (:mod:`.reduction`) and
the Hadamard-response baseline (:mod:`.hadamard_response`)."""
