"""User side: noise samplers, rounding, secret sharing, item-level randomizers."""
