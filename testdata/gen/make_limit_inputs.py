#!/usr/bin/python3
"""Write the resource-limit models in testdata/bad/limit_*: each declares more than fusectl
will allocate or recurse into, in a file of a few hundred bytes.

fusectl must refuse each with one line naming the file and the tensor, input or node
(exit 3), before it allocates anything; tests/test_resource_limits.cpp asserts the messages.
The files are committed so that the tests need no Python; output is deterministic:

    /usr/bin/python3 testdata/gen/make_limit_inputs.py
"""
import os

from onnx import TensorProto, helper

import make_bad_inputs  # beside this file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "bad"))

# 2^45 floats: 128 TiB, far beyond the 16 GiB default, yet no int64 overflow.
HUGE = [1 << 20, 1 << 20, 32]


def model(nodes, inputs=None, outputs=None, initializers=(), opset=13):
    # make_bad_inputs' one-graph model (X float[2] -> Y float[2] unless given), named for here.
    return make_bad_inputs.model(nodes, inputs, outputs, initializers, opset=opset,
                                 graph_name="limits", producer="make_limit_inputs")


def save(name, m, folder=OUT):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(m.SerializeToString())


def declared_only(name, dims):
    """A float tensor that declares `dims` but holds no data (the file stays tiny)."""
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.raw_data = b""
    return t


def nested_ifs(levels):
    """`levels` If nodes, each in the then-branch of the one above; the innermost is an Identity."""
    inner_out = "y{}".format(levels)
    body = helper.make_graph([helper.make_node("Identity", ["X"], [inner_out],
                                               name="innermost")],
                             "level{}".format(levels), [],
                             [helper.make_tensor_value_info(inner_out, TensorProto.FLOAT, [2])])
    for level in range(levels, 0, -1):
        out = "y{}".format(level - 1) if level > 1 else "Y"
        leaf_out = "e{}".format(level)
        leaf = helper.make_graph([helper.make_node("Identity", ["X"], [leaf_out])],
                                 "leaf{}".format(level), [],
                                 [helper.make_tensor_value_info(leaf_out, TensorProto.FLOAT, [2])])
        node = helper.make_node("If", ["C"], [out], name="if_level_{}".format(level),
                                then_branch=body, else_branch=leaf)
        if level == 1:
            return model([node], inputs=[
                helper.make_tensor_value_info("X", TensorProto.FLOAT, [2]),
                helper.make_tensor_value_info("C", TensorProto.BOOL, [])])
        body = helper.make_graph([node], "level{}".format(level - 1), [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2])])


def main():
    # An initializer that declares 128 TiB (its raw_data is empty).
    save("limit_huge_initializer.onnx", model(
        [helper.make_node("Add", ["X", "W"], ["Y"], name="add_huge")],
        initializers=[declared_only("W", HUGE)]))
    # The same as a Constant node's value attribute.
    value = declared_only("value", HUGE)
    save("limit_huge_constant.onnx", model(
        [helper.make_node("Constant", [], ["W"], name="huge_constant", value=value),
         helper.make_node("Add", ["X", "W"], ["Y"], name="add_huge")]))
    # A graph input whose declared shape `run` would have to allocate and seed: 4e15 bytes.
    save("limit_huge_input.onnx", model(
        [helper.make_node("Relu", ["X"], ["Y"], name="relu")],
        inputs=[helper.make_tensor_value_info("X", TensorProto.FLOAT, [100000, 100000, 100000])],
        outputs=[helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]))
    # A graph input whose dims overflow int64 when multiplied.
    save("limit_input_dims_overflow.onnx", model(
        [helper.make_node("Relu", ["X"], ["Y"], name="relu")],
        inputs=[helper.make_tensor_value_info("X", TensorProto.FLOAT, [1 << 40, 1 << 40])],
        outputs=[helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]))
    # Seeded with 1 for `seq`, still 2^64 bytes (found by bench/mutate_models.py: `run` crashed).
    save("limit_seeded_input_overflow.onnx", model(
        [helper.make_node("Relu", ["X"], ["Y"], name="relu")],
        inputs=[helper.make_tensor_value_info("X", TensorProto.FLOAT, [1 << 62, "seq"])],
        outputs=[helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]))
    # 64 KiB of weights: loads by default, refused under --max-tensor-bytes 32KiB.
    w = helper.make_tensor("W", TensorProto.FLOAT, [128, 128], b"\0" * (64 << 10), raw=True)
    save("limit_64kib_initializer.onnx", model(
        [helper.make_node("Add", ["X", "W"], ["Y"], name="add_64kib")],
        inputs=[helper.make_tensor_value_info("X", TensorProto.FLOAT, [128, 128])],
        outputs=[helper.make_tensor_value_info("Y", TensorProto.FLOAT, [128, 128])],
        initializers=[w]))
    # External data that declares 1 GiB of a 16-byte file.
    ext = TensorProto()
    ext.name = "W"
    ext.data_type = TensorProto.FLOAT
    ext.dims.extend([1 << 28])
    ext.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "limit_external_short.bin"), ("offset", "0"),
                 ("length", str(4 << 28))):
        entry = ext.external_data.add()
        entry.key, entry.value = k, v
    folder = os.path.join(OUT, "limit_external_short")
    save("model.onnx", model(
        [helper.make_node("Add", ["X", "W"], ["Y"], name="add_external")],
        inputs=[helper.make_tensor_value_info("X", TensorProto.FLOAT, [1 << 28])],
        outputs=[helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1 << 28])],
        initializers=[ext]), folder)
    with open(os.path.join(folder, "limit_external_short.bin"), "wb") as f:
        f.write(b"\0" * 16)
    # Subgraphs nested 65 levels deep (one past the limit), and 16 deep, which loads.
    save("limit_deep_subgraphs.onnx", nested_ifs(65))
    save("limit_nested_16.onnx", nested_ifs(16))


if __name__ == "__main__":
    main()
