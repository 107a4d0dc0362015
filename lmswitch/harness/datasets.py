"""The project's style datasets in ``lmswitch/data/styles/`` (provenance in ``lmswitch/data/styles/DATA.md``).

Each dataset is two files of paired texts, one per line: line ``i`` of both
files is about the same topic or situation, once in each style, so a switch
learns the style rather than the topic. Every tenth pair (``i % 10 == 9``) is
held out of training and used only for evaluation; alternate held-out pairs form
its dev and test halves (:meth:`StyleData.heldout`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lmswitch.harness.options import check_split
from lmswitch.io.resources import styles_dir

DATA_DIR = styles_dir()
SOURCE_PATH = "lmswitch/data/styles"  # DATA_DIR as the source tree names it, for cards and docs
HELDOUT_EVERY = 10  # pair i is held out when i % HELDOUT_EVERY == HELDOUT_EVERY - 1


@dataclass(frozen=True)
class DatasetFiles:
    """Where one style dataset lives (two files in one folder) and what its two directions are called."""

    folder: str
    positive_file: str  # the texts positive ε moves toward
    negative_file: str
    positive_label: str
    negative_label: str

    def files(self) -> tuple[str, str]:
        """(positive, negative) file paths relative to the data root, e.g. ``"sentiment/positive.txt"``."""
        return f"{self.folder}/{self.positive_file}", f"{self.folder}/{self.negative_file}"


DATASETS: dict[str, DatasetFiles] = {
    "sentiment": DatasetFiles("sentiment", "positive.txt", "negative.txt", "positive", "negative"),
    "toxicity": DatasetFiles("toxicity", "civil.txt", "toxic.txt", "non-toxic", "toxic"),
    "formality": DatasetFiles("formality", "formal.txt", "informal.txt", "formal", "informal"),
}


@dataclass(frozen=True)
class StyleData:
    """Paired texts of one style contrast; ``positive[i]`` and ``negative[i]`` share a topic."""

    name: str
    positive_label: str
    negative_label: str
    positive: tuple[str, ...]
    negative: tuple[str, ...]

    def _part(self, held: bool, limit: int | None = None) -> tuple[list[str], list[str]]:
        keep = [i for i in range(len(self.positive)) if (i % HELDOUT_EVERY == HELDOUT_EVERY - 1) == held]
        if limit is not None:
            keep = keep[:limit]
        return [self.positive[i] for i in keep], [self.negative[i] for i in keep]

    def train(self, limit: int | None = None) -> tuple[list[str], list[str]]:
        """(positive, negative) training texts; ``limit`` keeps only the first pairs."""
        return self._part(False, limit)

    def heldout(self, split: str | None = None) -> tuple[list[str], list[str]]:
        """(positive, negative) texts never used for training: all of them, or their ``"dev"`` or ``"test"`` half.

        The halves alternate (held-out pairs 0, 2, 4 … are dev; 1, 3, 5 … test), like the prompt splits:
        choices are made on dev and reported on test.
        """
        check_split(split, "all held-out pairs")
        pos, neg = self._part(True)
        if split is None:
            return pos, neg
        first = 0 if split == "dev" else 1
        return pos[first::2], neg[first::2]


def _read_lines(path: Path) -> tuple[str, ...]:
    if not path.is_file():
        raise ValueError(f"dataset file {path} is missing; rebuild it or point --data at the folder that holds it")
    return tuple(line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def load_dataset(name: str, root: str | Path | None = None) -> StyleData:
    """Load one of :data:`DATASETS` from ``root`` (default: the shipped ``lmswitch/data/styles``).

    >>> positive, negative = load_dataset("sentiment").train(limit=30)   # doctest: +SKIP
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    spec = DATASETS[name]
    base = Path(root) if root is not None else DATA_DIR
    pos, neg = (_read_lines(base / f) for f in spec.files())
    if len(pos) != len(neg):
        raise ValueError(f"dataset {name!r} is not paired: {len(pos)} {spec.positive_label} vs {len(neg)} {spec.negative_label} lines")
    return StyleData(name, spec.positive_label, spec.negative_label, pos, neg)
