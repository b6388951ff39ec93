// Format names and streaming a rendering into a file atomically.
#include <ostream>
#include <streambuf>

#include "fusectl/graph/render.h"
#include "onnx_convert.h"

namespace fusectl {

std::optional<DumpFormat> dumpFormatFromName(std::string_view name) {
  if (name == "text") return DumpFormat::Text;
  if (name == "json") return DumpFormat::Json;
  if (name == "dot") return DumpFormat::Dot;
  return std::nullopt;
}

std::string_view dumpFormatName(DumpFormat format) {
  switch (format) {
    case DumpFormat::Text: return "text";
    case DumpFormat::Json: return "json";
    case DumpFormat::Dot: return "dot";
  }
  return "text";
}

void renderModel(const Model& model, DumpFormat format, std::ostream& out,
                 const RenderOptions& options) {
  switch (format) {
    case DumpFormat::Text: renderText(model, out, options); break;
    case DumpFormat::Json: renderJson(model, out, options); break;
    case DumpFormat::Dot: renderDot(model, out, options); break;
  }
}

namespace {
// An ostream's buffer that hands what it is given to an AtomicFile, which batches small
// writes itself: the renderers stream, and the file is fsync'ed and renamed into place as a
// saved model is.
class AtomicFileBuf : public std::streambuf {
 public:
  explicit AtomicFileBuf(onnx_convert::AtomicFile& file) : file_(file) {}

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    file_.write(&ch, 1);
    return c;
  }
  std::streamsize xsputn(const char* data, std::streamsize n) override {
    file_.write(data, static_cast<size_t>(n));
    return n;
  }

 private:
  onnx_convert::AtomicFile& file_;
};
}  // namespace

void renderModelToFile(const Model& model, DumpFormat format, const std::string& path,
                       const RenderOptions& options) {
  onnx_convert::AtomicFile file(path);  // removes its temporary file unless committed
  AtomicFileBuf buffer(file);
  std::ostream out(&buffer);
  // A write error is AtomicFile's own Error (naming the file and the reason), rethrown as is.
  out.exceptions(std::ios::badbit);
  renderModel(model, format, out, options);
  file.commit();
}

}  // namespace fusectl
