"""The book corpus: read it (a .tar.xz or a folder of .txt files), strip Project Gutenberg's header
and licence, and split whole books into training and held-out sets by a seeded rule."""
import hashlib
import random
import re
import tarfile
from pathlib import Path

START = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG EBOOK.*$", re.M)
END = re.compile(r"^\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG EBOOK", re.M)
LANGUAGE = re.compile(r"^Language: *(.+?) *$", re.M)


class CorpusError(ValueError):
    pass


def read_raw_books(path):
    """({file stem: text}, {file stem: sha256 of the file, 16 hex digits}) of every .txt under
    `path` (a folder, or a .tar/.tar.xz/.tar.gz file); texts lose a BOM and CRLF line ends."""
    path = Path(path)
    books = {}
    if path.is_dir():
        for f in sorted(path.rglob("*.txt")):
            books[f.stem] = f.read_bytes()
    elif path.is_file() and tarfile.is_tarfile(path):
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                if m.isfile() and m.name.endswith(".txt"):
                    books[Path(m.name).stem] = tar.extractfile(m).read()
    else:
        raise CorpusError(f"--corpus {path}: neither a folder nor a tar archive")
    if not books:
        raise CorpusError(f"--corpus {path}: no .txt files in it")
    texts = {}
    for name, raw in books.items():
        try:
            texts[name] = raw.decode("utf-8-sig").replace("\r\n", "\n")
        except UnicodeDecodeError as e:
            raise CorpusError(f"{path}: book {name}.txt is not UTF-8 ({e})") from None
    return texts, {name: hashlib.sha256(raw).hexdigest()[:16] for name, raw in books.items()}


def strip_gutenberg(name, text):
    """(body, language): the text between the START and END markers, and the header's Language."""
    start, end = START.search(text), END.search(text)
    if not start or not end or end.start() < start.end():
        raise CorpusError(f"book {name}.txt: no '*** START OF ... ***' / '*** END OF' Project Gutenberg markers")
    lang = LANGUAGE.search(text, 0, start.start())
    return text[start.end():end.start()].strip() + "\n", (lang.group(1) if lang else "unknown")


def work_of(name):
    """Books that are editions of one work share a key: 'classics__frankenstein_42324' -> '...frankenstein'."""
    return re.sub(r"_\d+$", "", name)


def split_books(books, languages, n_heldout, seed, min_chars, max_chars):
    """(train names, held-out names). Held out: `n_heldout` books drawn with random.Random(seed) from
    the eligible ones (sorted by name): English, the only edition of their work in the corpus (so no
    other edition leaks into training), and min_chars..max_chars long."""
    editions = {}
    for name in books:
        editions.setdefault(work_of(name), []).append(name)
    eligible = sorted(n for n, text in books.items()
                      if languages[n] == "English" and len(editions[work_of(n)]) == 1
                      and min_chars <= len(text) <= max_chars)
    if n_heldout < 1 or n_heldout > len(eligible) or n_heldout >= len(books):
        raise CorpusError(f"--heldout-books {n_heldout}: {len(eligible)} of {len(books)} books are eligible "
                          f"(English, one edition, {min_chars}..{max_chars} characters)")
    heldout = sorted(random.Random(seed).sample(eligible, n_heldout))
    train = sorted(n for n in books if n not in heldout)
    return train, heldout
