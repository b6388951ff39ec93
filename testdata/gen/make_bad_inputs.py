#!/usr/bin/python3
"""Write the malformed (and a few oddly-formed but valid) models in testdata/bad/.

Each file exercises one reason fusectl must refuse to load a model, with one line naming
the file and the reason; tests/test_bad_input.cpp asserts the message. The generated files
are committed so that the tests need no Python. Run from anywhere with the Debian python
(needs python3-onnx); output is deterministic:

    /usr/bin/python3 testdata/gen/make_bad_inputs.py
"""
import os
import struct

import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "bad"))


def write(name, data):
    path = os.path.join(OUT, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def model(nodes, inputs=None, outputs=None, initializers=(), ir_version=8, opset=13,
          graph_name="bad", producer="make_bad_inputs"):
    inputs = inputs if inputs is not None else [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])]
    outputs = outputs if outputs is not None else [
        helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])]
    graph = helper.make_graph(nodes, graph_name, inputs, outputs, list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name=producer)
    m.ir_version = ir_version
    return m


def save(name, m):
    write(name, m.SerializeToString())


def relu(x, y, name=""):
    return helper.make_node("Relu", [x], [y], name=name)


def raw_tensor(name, dims, data, data_type=TensorProto.FLOAT):
    t = TensorProto()
    t.name = name
    t.data_type = data_type
    t.dims.extend(dims)
    t.raw_data = data
    return t


def external_tensor(name, dims, location, offset=0, length=None):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    entries = [("location", location), ("offset", str(offset))]
    if length is not None:
        entries.append(("length", str(length)))
    for k, v in entries:
        e = t.external_data.add()
        e.key = k
        e.value = v
    return t


def add_with(init_name):
    return helper.make_node("Add", ["X", init_name], ["Y"], name="add")


def main():
    good = model([relu("X", "Y", "relu")])

    # Not a model at all.
    write("empty.onnx", b"")
    write("text.onnx", b"This is a plain text file, not an ONNX model.\n")
    # Deterministic bytes that do not parse as protobuf (0xff starts an invalid tag).
    write("random_bytes.onnx", bytes((i * 131 + 7) % 256 for i in range(64)) + b"\xff" * 16)
    no_graph = onnx.ModelProto()
    no_graph.ir_version = 8
    no_graph.producer_name = "make_bad_inputs"
    save("no_graph.onnx", no_graph)
    good_bytes = good.SerializeToString()
    write("truncated.onnx", good_bytes[: len(good_bytes) // 2])

    for v in (0, 14):
        m = model([relu("X", "Y")], ir_version=v)
        save("ir_version_%d.onnx" % v, m)

    # Graph structure.
    save("cycle.onnx", model([
        helper.make_node("Add", ["X", "C"], ["A"], name="first"),
        helper.make_node("Relu", ["A"], ["B"], name="second"),
        helper.make_node("Relu", ["B"], ["C"], name="third"),
        helper.make_node("Relu", ["A"], ["Y"], name="last"),
    ]))
    save("undefined_input.onnx", model([
        helper.make_node("Add", ["X", "missing_value"], ["Y"], name="adder")]))
    save("two_writers.onnx", model([
        relu("X", "Y", "writer_one"), helper.make_node("Sigmoid", ["X"], ["Y"], name="writer_two")]))
    save("shadow_input.onnx", model([relu("X", "Y", "r1"), relu("Y", "X", "overwrites_input")]))
    save("shadow_initializer.onnx", model(
        [helper.make_node("Add", ["X", "W"], ["Y"], name="add"), relu("X", "W", "overwrites_w")],
        initializers=[raw_tensor("W", [2], struct.pack("<2f", 1, 2))]))
    save("dangling_output.onnx", model([relu("X", "Y", "relu")], outputs=[
        helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2]),
        helper.make_tensor_value_info("nothing_makes_me", TensorProto.FLOAT, [2])]))
    # A subgraph two levels down reads a name that no scope defines.
    inner = helper.make_graph([helper.make_node("Add", ["X", "ghost"], ["iy"], name="inner_add")],
                              "inner", [], [helper.make_tensor_value_info("iy", TensorProto.FLOAT, [2])])
    save("nested_undefined.onnx", model([
        helper.make_node("Greater", ["X", "X"], ["c"]),
        helper.make_node("ReduceMin", ["c"], ["cond"], keepdims=0),
        helper.make_node("If", ["cond"], ["Y"], name="outer_if", then_branch=inner, else_branch=inner),
    ]))
    # A then-branch node writes 'W', which the main graph already defines: ONNX's SSA rule
    # (and ONNX Runtime) refuses a subgraph node output that shadows an enclosing name.
    then_w = helper.make_graph([relu("X", "W", "branch_writes_w")], "then_w", [],
                               [helper.make_tensor_value_info("W", TensorProto.FLOAT, [2])])
    else_w = helper.make_graph([relu("X", "e", "else_relu")], "else_w", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    save("shadow_outer.onnx", model([
        helper.make_node("Greater", ["X", "W"], ["c"]),
        helper.make_node("ReduceMin", ["c"], ["cond"], keepdims=0),
        helper.make_node("If", ["cond"], ["Y"], name="if_w", then_branch=then_w, else_branch=else_w),
    ], initializers=[raw_tensor("W", [2], struct.pack("<2f", 1, 2))]))

    # Attributes.
    m = model([helper.make_node("LeakyRelu", ["X"], ["Y"], name="leaky", alpha=0.5)])
    m.graph.node[0].attribute[0].type = onnx.AttributeProto.INT  # but f is filled
    save("attr_type_mismatch.onnx", m)
    m = model([helper.make_node("LeakyRelu", ["X"], ["Y"], name="leaky", alpha=0.5)])
    m.graph.node[0].attribute[0].ClearField("type")
    save("attr_undefined_type.onnx", m)
    m = model([helper.make_node("LeakyRelu", ["X"], ["Y"], name="leaky", alpha=0.5)],
              ir_version=2, opset=6)
    m.graph.node[0].attribute[0].ClearField("type")  # valid before IR 3: the field says float
    save("ir2_untyped_attribute.onnx", m)

    # Nodes that break their op's schema (schema_check.cpp): each once crashed a pass or a
    # kernel, or was accepted by dump, convert and optimize.
    image = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, 4, 4])]
    image_out = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 1, 4, 4])]
    weight = raw_tensor("W", [1, 1, 1, 1], struct.pack("<f", 2))
    save("empty_required_input.onnx", model([
        helper.make_node("Div", ["", "X"], ["Y"], name="div_without_dividend")]))
    channel = [raw_tensor(n, [1], struct.pack("<f", v))
               for n, v in (("scale", 1), ("bias", 0), ("mean", 0), ("var", 1))]
    save("batchnorm_empty_input.onnx", model([
        helper.make_node("BatchNormalization", ["", "scale", "bias", "mean", "var"], ["Y"],
                         name="bn_without_x")], image, image_out, channel))
    save("conv_one_input.onnx", model([
        helper.make_node("Conv", ["X"], ["Y"], name="conv_without_weight")], image, image_out))
    save("conv_bad_strides.onnx", model([
        helper.make_node("Conv", ["X", "W"], ["Y"], name="conv_string_strides", strides="bad")],
        image, image_out, [weight]))
    save("too_many_inputs.onnx", model([
        helper.make_node("Relu", ["X", "X"], ["Y"], name="relu_two_inputs")]))
    save("missing_required_attribute.onnx", model([
        helper.make_node("Cast", ["X"], ["Y"], name="cast_without_to")]))
    save("empty_variadic_input.onnx", model([
        helper.make_node("Concat", ["X", ""], ["Y"], name="concat_with_hole", axis=0)]))
    # An attribute that this version of the op takes as an input: ignored by the op, but a
    # pass that read it rewrote the node for axes it does not reduce.
    rows = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])
    rows_out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 1])
    save("reduce_mean_axes_attribute_opset18.onnx", model([
        helper.make_node("ReduceMean", ["X"], ["Y"], name="mean_with_axes_attribute", axes=[-1])],
        [rows], [rows_out], opset=18))
    save("reduce_sum_axes_attribute_opset13.onnx", model([
        helper.make_node("ReduceSum", ["X"], ["Y"], name="sum_with_axes_attribute", axes=[-1])],
        [rows], [rows_out]))
    m = model([helper.make_node("FusedConv", ["X"], ["Y"], name="fused_without_weight",
                                domain="fusectl")], image, image_out)
    m.opset_import.append(helper.make_opsetid("fusectl", 1))
    save("fused_conv_one_input.onnx", m)

    # Tensors.
    save("raw_data_short.onnx", model([add_with("W")], initializers=[
        raw_tensor("W", [3], struct.pack("<2f", 1, 2))]))
    save("raw_data_long.onnx", model([add_with("W")], initializers=[
        raw_tensor("W", [2], struct.pack("<3f", 1, 2, 3))]))
    short = helper.make_tensor("W", TensorProto.FLOAT, [2], [1.0, 2.0])
    short.dims[0] = 4  # make_tensor checks the count; the file must not
    save("typed_data_short.onnx", model([add_with("W")], initializers=[short]))
    save("negative_dim.onnx", model([add_with("W")], initializers=[
        raw_tensor("W", [2, -2], b"")]))
    save("dims_overflow.onnx", model([add_with("W")], initializers=[
        raw_tensor("W", [1 << 40, 1 << 40], b"")]))
    save("unknown_dtype.onnx", model([add_with("W")], initializers=[
        raw_tensor("W", [2], b"\0" * 8, data_type=99)]))

    # External data.
    weights = struct.pack("<2f", 1.5, -2.5)
    write("external_ok/weights.bin", weights)
    save("external_ok/model.onnx", model([add_with("W")], initializers=[
        external_tensor("W", [2], "weights.bin", 0, 8)]))
    save("external_missing/model.onnx", model([add_with("W")], initializers=[
        external_tensor("W", [2], "no_such_file.bin", 0, 8)]))
    write("external_outside.bin", weights)  # exists, so only the path rule refuses it
    save("external_escape/model.onnx", model([add_with("W")], initializers=[
        external_tensor("W", [2], "../external_outside.bin", 0, 8)]))
    save("external_absolute/model.onnx", model([add_with("W")], initializers=[
        external_tensor("W", [2], "/etc/passwd", 0, 8)]))
    write("external_beyond_end/weights.bin", weights)
    save("external_beyond_end/model.onnx", model([add_with("W")], initializers=[
        external_tensor("W", [2], "weights.bin", 4, 8)]))

    # Valid but unusual: must load.
    save("unknown_op.onnx", model([helper.make_node("FrobnicateXYZ", ["X"], ["Y"], name="frob",
                                                    domain="com.nowhere", knob=3)],
                                  opset=13))
    save("unsorted_nodes.onnx", model([relu("A", "Y", "second"), relu("X", "A", "first")]))

    write("syntax_error.onnxtxt", b"""<
  ir_version: 8,
  opset_import: ["" : 13]
>
broken (float[2] X) => (float[2] Y)
{
  Y = Relu (X
}
""")


if __name__ == "__main__":
    main()
