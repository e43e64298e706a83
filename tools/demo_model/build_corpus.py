#!/usr/bin/env python3
# Builds the chronos-demo training corpus from text that Debian packages ship, one domain per source family.
"""Build the multi-domain corpus used to train models/chronos-demo.

Domains are deliberately far apart so that a prompt's domain predicts which experts it routes to:
  prose - English dictionary definitions (dict-gcide) and fortune cookies (fortunes, fortunes-min)
  tech  - English technical documentation: the Debian Reference (debian-reference-en) and manual pages
  code  - source code: the Python 3.11 standard library (.py) and C headers under /usr/include
  fr, de, es - the translated Debian Reference plus the translated manual pages (manpages-{fr,de,es})

Every document is assigned to train or test by a hash of its name (about 5% held out per domain), so the
split is stable across reruns. Output (in --out):
  corpus.jsonl       one JSON object per document: {"domain", "split", "source", "text"}
  files.tsv          domain, split, package, path, bytes (bytes of cleaned text) for every source file used
  summary.json       bytes and documents per domain and split
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import re
import sys

TEST_PERCENT = 5


def split_of(name):
    h = int(hashlib.sha1(name.encode()).hexdigest()[:8], 16)
    return "test" if h % 100 < TEST_PERCENT else "train"


def read_text(path):
    opener = gzip.open if path.endswith(".gz") or path.endswith(".dz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def dpkg_owner_map():
    owners = {}
    for lst in glob.glob("/var/lib/dpkg/info/*.list"):
        pkg = os.path.basename(lst)[:-5].split(":")[0]
        with open(lst, errors="replace") as f:
            for line in f:
                owners[line.rstrip("\n")] = pkg
    return owners


def owner_of(owners, path):
    return owners.get(path) or owners.get(os.path.realpath(path)) or "?"


def dpkg_versions():
    versions, pkg = {}, None
    with open("/var/lib/dpkg/status", errors="replace") as f:
        for line in f:
            if line.startswith("Package: "):
                pkg = line[9:].strip()
            elif line.startswith("Version: ") and pkg:
                versions[pkg] = line[9:].strip()
    return versions


# ---------------------------------------------------------------------------------------------- cleaners

ROFF_ESCAPES = [
    (re.compile(r"\\f(\(..|\[[^\]]*\]|.)"), ""),  # font changes
    (re.compile(r"\\s[+-]?\d"), ""),  # size changes
    (re.compile(r"\\\(em|\\\[em\]"), "\u2014"),
    (re.compile(r"\\\(en|\\\[en\]"), "\u2013"),
    (re.compile(r"\\\(aq|\\\[aq\]"), "'"),
    (re.compile(r"\\\(dq|\\\[dq\]"), '"'),
    (re.compile(r"\\\(bu|\\\[bu\]"), "\u2022"),
    (re.compile(r"\\\(co|\\\[co\]"), "\u00a9"),
    (re.compile(r"\\\(lq|\\\(rq|\\\(oq|\\\(cq"), '"'),
    (re.compile(r"\\\*\(..|\\\*\[[^\]]*\]|\\\*."), ""),  # strings
    (re.compile(r"\\\(..|\\\[[^\]]*\]"), ""),  # other special characters
    (re.compile(r"\\[-]"), "-"),
    (re.compile(r"\\[&|^%]"), ""),
    (re.compile(r"\\[ ~0]"), " "),
    (re.compile(r"\\e"), "\\\\"),
    (re.compile(r"\\c$"), ""),
]
ROFF_TEXT_MACROS = {"B", "I", "BR", "RB", "IR", "RI", "BI", "IB", "SM", "SB", "IP", "TP", "UR", "MT", "OP", "Nm",
                    "Nd", "Ar", "Fl", "Pa", "Xr", "Dv", "Ev", "Em", "Sy", "Li", "Cm", "It", "Op", "Va", "Fn", "Ft"}


def clean_roff(text):
    """Turn man(7) source into readable plain text (headings, paragraphs, inline fonts dropped)."""
    out = []
    for line in text.split("\n"):
        if line.startswith(('.\\"', "'\\\"", '\\"', ".\\}")):
            continue
        if line.startswith((".", "'")):
            parts = line[1:].strip().split(None, 1)
            if not parts:
                continue
            macro, args = parts[0], (parts[1] if len(parts) > 1 else "")
            args = args.replace('"', "")
            if macro in ("SH", "SS", "Sh", "Ss"):
                out.append("")
                out.append(args)
            elif macro in ("PP", "LP", "P", "sp", "Pp", "br"):
                out.append("")
            elif macro in ROFF_TEXT_MACROS:
                if macro in ("IP", "TP"):
                    out.append("")
                if macro not in ("TP",) and args:
                    out.append(args if macro not in ("BR", "RB", "IR", "RI", "BI", "IB") else args.replace(" ", ""))
            continue
        out.append(line)
    text = "\n".join(out)
    for pat, rep in ROFF_ESCAPES:
        text = pat.sub(rep, text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def clean_gcide(text):
    """dictd's GCIDE: drop pronunciation markup and [1913 Webster] tags, unwrap paragraphs."""
    text = re.sub(r"\\([^\\\n]*)\\", lambda m: m.group(1).replace("*", "").replace('"', "").replace("`", ""), text)
    text = re.sub(r"[{}]", "", text)
    text = re.sub(r"\s*\[(1913 Webster|Webster 1913 Suppl\.|PJC|WordNet 1\.5|Century Dict\.)[^\]]*\]", "", text)
    paras = []
    for block in re.split(r"\n\s*\n", text):
        lines = [l.strip() for l in block.split("\n") if l.strip()]
        if lines:
            paras.append(" ".join(lines))
    return paras


# ----------------------------------------------------------------------------------------------- domains


def chunks_of(items, target_bytes):
    cur, size = [], 0
    for it in items:
        cur.append(it)
        size += len(it) + 2
        if size >= target_bytes:
            yield cur
            cur, size = [], 0
    if cur:
        yield cur


def prose_docs():
    path = "/usr/share/dictd/gcide.dict.dz"
    raw = read_text(path)
    # The text before the first entry is the database header and the license.
    paras = clean_gcide(raw[raw.index("\nA \\A\\ (named"):])
    paras = [p for p in paras if not p.startswith(("Begin file", "* * *", "End of file"))]
    for i, group in enumerate(chunks_of(paras, 4000)):
        yield path, f"{path}#{i}", "\n\n".join(group)
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if path.endswith((".dat", ".u8")) or os.path.islink(path) or os.path.isdir(path):
            continue
        cookies = [c.strip("\n") for c in re.split(r"\n%\n", read_text(path)) if c.strip()]
        for i, group in enumerate(chunks_of(cookies, 3000)):
            yield path, f"{path}#{i}", "\n\n".join(group)


def reference_docs(lang):
    path = f"/usr/share/debian-reference/debian-reference.{lang}.txt.gz"
    text = read_text(path)
    # The table of contents repeats the section titles; split the body at numbered section headings.
    sections = re.split(r"\n(?=\d+\.\d+(?:\.\d+)?\. [^\n]+\n)", text)
    for i, group in enumerate(chunks_of(sections, 4000)):
        body = "\n".join(group).strip()
        body = re.sub(r"[ \t]+\n", "\n", body)
        yield path, f"{path}#{i}", body


def man_docs(root, sections):
    for sec in sections:
        for path in sorted(glob.glob(f"{root}/man{sec}/*")):
            # gcloud's thousands of generated pages come from outside Debian and would swamp the domain.
            if os.path.islink(path) or os.path.basename(path).startswith("gcloud"):
                continue
            text = read_text(path)
            if text.lstrip().startswith(".so "):
                continue
            body = clean_roff(text)
            if len(body) > 300:
                yield path, path, body[:20000]


def code_docs():
    for path in sorted(glob.glob("/usr/lib/python3.11/**/*.py", recursive=True)):
        if "/test" in path or "/idlelib/" in path or "/lib2to3/" in path or "site-packages" in path:
            continue
        text = read_text(path)
        if 300 < len(text):
            yield path, path, text[:20000]
    for path in sorted(glob.glob("/usr/include/**/*.h", recursive=True)):
        if os.path.islink(path):
            continue
        text = read_text(path)
        if 300 < len(text):
            yield path, path, text[:20000]


def python_docs():
    return (d for d in code_docs() if d[0].endswith(".py"))


def header_docs():
    return (d for d in code_docs() if d[0].endswith(".h"))


# Each domain lists its sources; the byte cap is shared fairly among them (see fair_caps).
DOMAINS = {
    "prose": [lambda: (d for d in prose_docs() if "dictd" in d[0]),
              lambda: (d for d in prose_docs() if "fortunes" in d[0])],
    "tech": [lambda: reference_docs("en"), lambda: man_docs("/usr/share/man", "158726")],
    "code": [python_docs, header_docs],
    "fr": [lambda: reference_docs("fr"), lambda: man_docs("/usr/share/man/fr", "158")],
    "de": [lambda: reference_docs("de"), lambda: man_docs("/usr/share/man/de", "158")],
    "es": [lambda: reference_docs("es"), lambda: man_docs("/usr/share/man/es", "158")],
}


def fair_caps(sizes, cap):
    """Split `cap` bytes among sources: small sources are kept whole, the rest share what is left."""
    caps, left = {}, cap
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    for k, i in enumerate(order):
        caps[i] = min(sizes[i], left // (len(order) - k))
        left -= caps[i]
    return [caps[i] for i in range(len(sizes))]


def domain_docs(sources, cap):
    lists = [list(make()) for make in sources]
    caps = fair_caps([sum(len(d[2]) for d in docs) for docs in lists], cap)
    out = []
    for docs, c in zip(lists, caps):
        out.extend(spread(docs, c))
    return out


def spread(docs, cap):
    """Keep at most `cap` bytes, taking documents evenly from the whole list rather than its head."""
    docs = list(docs)
    total = sum(len(d[2]) for d in docs)
    if total <= cap:
        return docs
    step = total / cap
    kept, acc = [], 0.0
    for d in docs:
        acc += 1.0
        if acc >= step:
            acc -= step
            kept.append(d)
    return kept


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cap-mb", type=float, default=7.0, help="max cleaned bytes per domain")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    owners, versions = dpkg_owner_map(), dpkg_versions()
    summary, files = {}, {}
    with open(os.path.join(args.out, "corpus.jsonl"), "w") as out:
        for domain, make in DOMAINS.items():  # make: list of source factories
            docs = domain_docs(make, int(args.cap_mb * 1e6))
            stats = summary.setdefault(domain, {"train_bytes": 0, "test_bytes": 0, "train_docs": 0, "test_docs": 0})
            for path, name, text in docs:
                if owner_of(owners, path) == "?":
                    continue  # only text that a Debian package ships
                split = split_of(name)
                out.write(json.dumps({"domain": domain, "split": split, "source": name, "text": text},
                                     ensure_ascii=False) + "\n")
                n = len(text.encode())
                stats[f"{split}_bytes"] += n
                stats[f"{split}_docs"] += 1
                key = (domain, split, path)
                files[key] = files.get(key, 0) + n
            print(domain, stats, file=sys.stderr, flush=True)
    with open(os.path.join(args.out, "files.tsv"), "w") as f:
        f.write("domain\tsplit\tpackage\tversion\tpath\tbytes\n")
        for (domain, split, path), n in sorted(files.items()):
            pkg = owner_of(owners, path)
            f.write(f"{domain}\t{split}\t{pkg}\t{versions.get(pkg, '?')}\t{path}\t{n}\n")
    pkgs = sorted({owner_of(owners, p) for (_, _, p) in files})
    summary["_packages"] = {p: versions.get(p, "?") for p in pkgs}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
