"""rlmm."""
