def flops(case) -> float:
    return 2.0 * case.n


def min_bytes(case) -> float:
    return 12.0 * case.n
