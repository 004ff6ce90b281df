"""The progress argument of long calls: None (quiet), a callable(done, total), or True (a tqdm
bar when tqdm is installed, else a line on stderr per layer)."""
import sys


def hook(progress, what):
    """(callback for the C++ side or None, close())."""
    if progress is None or progress is False:
        return None, lambda: None
    if callable(progress):
        return progress, lambda: None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        def line(done, total):
            print(f"{what}: layer {done}/{total}", file=sys.stderr, flush=True)
        return line, lambda: None
    bar = tqdm(desc=what, unit="layer")

    def update(done, total):
        bar.total = total
        bar.n = done
        bar.refresh()
    return update, bar.close
