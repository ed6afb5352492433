"""float64 reference and same-precision plain version of scale_add."""


def reference(x, y):
    return 2 * x.double() + y.double()


def plain(x, y):
    return 2 * x + y
