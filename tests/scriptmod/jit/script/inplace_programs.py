"""Programs that write tensors in place through other names and through views (issue 42:
alias analysis in scripted code). Kept out of the test module so that they have plain
source; Tensor methods only, so torch.jit.script runs the same text."""
from __future__ import annotations


def mul_through_a_row(x):
    row = x[0]
    row.mul_(2)
    return x


def fill_through_a_transpose(x):
    out = x.clone()
    t = out.t()
    t[0].fill_(7.0)
    return out


def add_into_a_renamed_fresh_tensor(x):
    y = x * 1
    y.add_(1)
    z = y
    z.mul_(3)
    return y + x


def a_view_sees_a_later_base_write(x):
    row = x[0]
    x.add_(1)
    return row * 1


def a_view_of_a_written_view(x):
    rest = x[1:]
    rest.mul_(2)
    first = rest[0]
    first.fill_(5.0)
    return rest * 1


def plus_equals_on_an_index_view(x):
    row = x[0]
    row += 1.0
    return x


def times_equals_on_a_view_call(x):
    flat = x.view(-1)
    flat *= 2.0
    return x


def store_into_a_named_view(x):
    z = x.clone()
    row = z[1]
    row[0] = -5.0
    return z


def store_through_chained_index(x):
    y = x.clone()
    y[0][1] = 5.0
    return y


def rows_scaled_in_a_loop(x):
    for i in range(x.size(0)):
        r = x[i]
        r.mul_(float(i))
    return x


def written_in_one_branch(x, c: bool):
    y = x.clone()
    if c:
        y[:, 0].zero_()
    return y


def narrow_then_select(x):
    x.narrow(1, 1, 2).select(0, 0).add_(3.0)
    return x


def two_views_of_one_base(x):
    a = x[0]
    b = x[:, 0]
    a.fill_(1.0)
    return b * 1


def plus_equals_renames(x):
    y = x * 2
    z = y
    y += 1
    return z


def store_into_maybe_the_argument(x, c: bool):
    if not c:
        x = x.clone()
    x[..., 1:3, 0:2] = -1.0
    return x


def divide_a_rebound_reshape(x):
    s = x * 2
    s = s.reshape(-1)
    s /= 4.0
    s[0] = 9.0
    return s


def write_chunks(x):
    a, b = x.chunk(2, dim=1)
    a.mul_(10.0)
    b += 1.0
    return x


def write_unbound_rows(x):
    rows = x.unbind(0)
    for i in range(len(rows)):
        rows[i].add_(float(i))
    return x


def write_split_pieces(x):
    y = x.clone()
    pieces = y.split(1, dim=0)
    pieces[1].fill_(-1.0)
    first = pieces[0]
    first[0, 0] = 42.0
    return y
