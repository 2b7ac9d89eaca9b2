"""PrivMRF (Cai, Lei, Wei, Xiao, VLDB 2021), summarised in seed 003 §2.3."""
