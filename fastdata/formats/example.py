"""``tf.train.Example`` through the protobuf package, without TensorFlow.

The message classes are built at import time from a descriptor that mirrors TensorFlow's
``example.proto`` and ``feature.proto`` (same package, names and field numbers), so the
bytes are exactly what TensorFlow writes and reads. No generated code, no protoc.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="fastdata/tensorflow_example.proto", package="tensorflow", syntax="proto3"
    )

    def message(name: str, fields: list[tuple[str, int, int, int, str]]) -> descriptor_pb2.DescriptorProto:
        msg = fdp.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            field = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                field.type_name = type_name
        return msg

    rep, opt = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
    message("BytesList", [("value", 1, _F.TYPE_BYTES, rep, "")])
    floats = message("FloatList", [("value", 1, _F.TYPE_FLOAT, rep, "")])
    floats.field[0].options.packed = True
    ints = message("Int64List", [("value", 1, _F.TYPE_INT64, rep, "")])
    ints.field[0].options.packed = True
    feature = message(
        "Feature",
        [
            ("bytes_list", 1, _F.TYPE_MESSAGE, opt, ".tensorflow.BytesList"),
            ("float_list", 2, _F.TYPE_MESSAGE, opt, ".tensorflow.FloatList"),
            ("int64_list", 3, _F.TYPE_MESSAGE, opt, ".tensorflow.Int64List"),
        ],
    )
    feature.oneof_decl.add(name="kind")
    for f in feature.field:
        f.oneof_index = 0
    features = message("Features", [("feature", 1, _F.TYPE_MESSAGE, rep, ".tensorflow.Features.FeatureEntry")])
    entry = features.nested_type.add(name="FeatureEntry")
    entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=opt)
    entry.field.add(name="value", number=2, type=_F.TYPE_MESSAGE, label=opt, type_name=".tensorflow.Feature")
    entry.options.map_entry = True
    message("Example", [("features", 1, _F.TYPE_MESSAGE, opt, ".tensorflow.Features")])
    return fdp


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())
Example = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("tensorflow.Example"))
"""The ``tensorflow.Example`` message class (wire-compatible with ``tf.train.Example``)."""


@dataclass(frozen=True)
class ImageRecord:
    """One image sample as stored in a shard."""

    image: bytes
    label: int
    class_name: str = ""
    filename: str = ""
    image_format: str = ""
    height: int = 0
    width: int = 0
    fields: dict[str, tuple[str, list]] = field(default_factory=dict)  # name -> ("int64"|"float"|"bytes", values)


def encode_example(record: ImageRecord) -> bytes:
    """Serialize ``record`` as a ``tf.train.Example`` with the ImageNet-style feature keys.

    Keys: ``image/encoded``, ``image/class/label``, ``image/class/text``, ``image/filename``,
    ``image/format``, ``image/height``, ``image/width``. Serialization is deterministic
    (map entries sorted), so the same record always gives the same bytes.
    """
    example = Example()
    feature = example.features.feature
    feature["image/encoded"].bytes_list.value.append(record.image)
    feature["image/class/label"].int64_list.value.append(record.label)
    feature["image/class/text"].bytes_list.value.append(record.class_name.encode("utf-8"))
    feature["image/filename"].bytes_list.value.append(record.filename.encode("utf-8"))
    feature["image/format"].bytes_list.value.append(record.image_format.encode("utf-8"))
    feature["image/height"].int64_list.value.append(record.height)
    feature["image/width"].int64_list.value.append(record.width)
    add_fields(feature, record.fields)
    return example.SerializeToString(deterministic=True)


def add_fields(feature: Any, fields: dict[str, tuple[str, list]]) -> None:
    """Add ``fields`` (``{name: (list kind, values)}``, :mod:`fastdata.formats.fields`) to a feature map, by name."""
    for name, (kind, values) in fields.items():
        getattr(feature[name], f"{kind}_list").value.extend(values)


def encode_fields(fields: dict[str, tuple[str, list]]) -> bytes:
    """``fields`` alone as a serialized ``tf.train.Example`` (how an LMDB record stores them)."""
    example = Example()
    add_fields(example.features.feature, fields)
    return example.SerializeToString(deterministic=True)


def parse_features(data: bytes) -> Any:
    """The feature map of a serialized ``tf.train.Example``.

    Raises:
        ValueError: the bytes are not an Example.
    """
    example = Example()
    try:
        example.ParseFromString(data)
    except Exception as exc:  # protobuf raises its own DecodeError type per backend
        raise ValueError(f"record is not a tf.train.Example ({exc})") from exc
    return example.features.feature


def decode_example(data: bytes, *, label_offset: int = 0) -> ImageRecord:
    """Parse a serialized ``tf.train.Example`` holding an image.

    Args:
        data: the record payload.
        label_offset: added to ``image/class/label`` (e.g. -1 for TensorFlow's 1-based ImageNet records).

    Raises:
        ValueError: the payload is not an Example or has no ``image/encoded`` bytes.
    """
    feature = _image_features(data)
    return ImageRecord(
        image=feature["image/encoded"].bytes_list.value[0],
        label=_int(feature, "image/class/label", -label_offset) + label_offset,
        class_name=_text(feature, "image/class/text"),
        filename=_text(feature, "image/filename"),
        image_format=_text(feature, "image/format"),
        height=_int(feature, "image/height", 0),
        width=_int(feature, "image/width", 0),
    )


def decode_image_label(data: bytes, *, label_offset: int = 0) -> tuple[bytes, int]:
    """``(image bytes, label)`` of a serialized ``tf.train.Example``.

    :func:`decode_example` without the fields a
    reader does not return (class text, file name, format, size), the per-record read of ``ShardDataset``.

    Raises:
        ValueError: as :func:`decode_example`.
    """
    feature = _image_features(data)
    label = _int(feature, "image/class/label", -label_offset) + label_offset
    return feature["image/encoded"].bytes_list.value[0], label


def _image_features(data: bytes) -> Any:
    """The feature map of a serialized ``tf.train.Example`` that holds ``image/encoded`` bytes (ValueError if not)."""
    example = Example()
    try:
        example.ParseFromString(data)
    except Exception as exc:  # protobuf raises its own DecodeError type per backend
        raise ValueError(f"record is not a tf.train.Example ({exc})") from exc
    feature = example.features.feature
    if "image/encoded" not in feature or not feature["image/encoded"].bytes_list.value:
        raise ValueError("record has no 'image/encoded' bytes feature")
    return feature


def _int(feature: Any, key: str, default: int) -> int:
    if key in feature and feature[key].int64_list.value:
        return int(feature[key].int64_list.value[0])
    return default


def _text(feature: Any, key: str) -> str:
    if key in feature and feature[key].bytes_list.value:
        return feature[key].bytes_list.value[0].decode("utf-8", errors="replace")
    return ""
