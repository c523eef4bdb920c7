// IDX parsing with every length checked before it is trusted: the header's dimensions are user
// input, so their product is computed with overflow checks and compared with the bytes present.
#include "sgd/idx.h"

#include <zlib.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>

namespace gossip::sgd {
namespace {

std::uint32_t read_be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

int type_size(std::uint8_t type) {
  switch (type) {
    case 0x08:
    case 0x09:
      return 1;
    case 0x0B:
      return 2;
    case 0x0C:
    case 0x0D:
      return 4;
    case 0x0E:
      return 8;
    default:
      return 0;
  }
}

template <typename U>
U read_be(const unsigned char* p) {
  U v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) v = static_cast<U>((v << 8) | p[i]);
  return v;
}

float convert(std::uint8_t type, const unsigned char* p) {
  switch (type) {
    case 0x08:
      return static_cast<float>(p[0]);
    case 0x09:
      return static_cast<float>(static_cast<std::int8_t>(p[0]));
    case 0x0B:
      return static_cast<float>(static_cast<std::int16_t>(read_be<std::uint16_t>(p)));
    case 0x0C:
      return static_cast<float>(static_cast<std::int32_t>(read_be<std::uint32_t>(p)));
    case 0x0D:
      return std::bit_cast<float>(read_be<std::uint32_t>(p));
    case 0x0E:
      return static_cast<float>(std::bit_cast<double>(read_be<std::uint64_t>(p)));
    default:
      return 0;
  }
}

std::string hex_byte(unsigned v) {
  char b[4];
  std::snprintf(b, sizeof b, "%02x", v & 0xffu);
  return b;
}

}  // namespace

std::int64_t IdxArray::row_size() const {
  std::int64_t n = 1;
  for (std::size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

Result<std::string> gunzip(std::string_view bytes, const std::string& name) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    return internal_error(name + ": zlib inflateInit2 failed");
  }
  std::string out;
  out.resize(std::max<std::size_t>(bytes.size() * 4, 1 << 16));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  std::size_t produced = 0;
  int rc = Z_OK;
  while (true) {
    if (produced == out.size()) out.resize(out.size() * 2);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size() - produced, 1u << 30));
    const uInt before = zs.avail_out;
    rc = inflate(&zs, Z_NO_FLUSH);
    produced += before - zs.avail_out;
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      return corruption(name + ": gzip stream is truncated (ended after " +
                        std::to_string(produced) + " decompressed bytes)");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      std::string msg = zs.msg ? zs.msg : "inflate error " + std::to_string(rc);
      inflateEnd(&zs);
      return corruption(name + ": corrupt gzip data: " + msg);
    }
  }
  inflateEnd(&zs);
  out.resize(produced);
  return out;
}

Result<IdxArray> parse_idx(std::string_view bytes, const std::string& name) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4) {
    return corruption(name + ": IDX file is " + std::to_string(bytes.size()) +
                      " bytes, shorter than its 4-byte magic number");
  }
  if (p[0] != 0 || p[1] != 0) {
    return corruption(name + ": not an IDX file: magic number is " + hex_byte(p[0]) + " " +
                      hex_byte(p[1]) + " " + hex_byte(p[2]) + " " + hex_byte(p[3]) +
                      ", expected 00 00 <type> <ndims>");
  }
  IdxArray a;
  a.type = p[2];
  const int size = type_size(a.type);
  if (size == 0) {
    return corruption(name + ": unknown IDX element type 0x" + hex_byte(a.type) +
                      " (expected 08, 09, 0b, 0c, 0d or 0e)");
  }
  const int ndims = p[3];
  if (ndims == 0) return corruption(name + ": IDX header declares 0 dimensions");
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(ndims);
  if (bytes.size() < header) {
    return corruption(name + ": truncated IDX header: " + std::to_string(ndims) +
                      " dimensions need " + std::to_string(header) + " bytes, file has " +
                      std::to_string(bytes.size()));
  }
  std::uint64_t count = 1;
  for (int i = 0; i < ndims; ++i) {
    const std::uint32_t d = read_be32(p + 4 + 4 * i);
    a.dims.push_back(d);
    if (d != 0 && count > std::numeric_limits<std::uint64_t>::max() / 8 / d) {
      return corruption(name + ": IDX dimensions overflow");
    }
    count *= d;
  }
  const std::uint64_t expected = count * size;
  const std::uint64_t actual = bytes.size() - header;
  if (actual != expected) {
    std::string dims;
    for (std::size_t i = 0; i < a.dims.size(); ++i)
      dims += (i ? " x " : "") + std::to_string(a.dims[i]);
    return corruption(name + ": IDX payload is " + std::to_string(actual) +
                      " bytes but the header (" + dims + ", " + std::to_string(size) +
                      "-byte elements) says " + std::to_string(expected) +
                      (actual < expected ? " (truncated file)" : " (trailing bytes)"));
  }
  a.values.resize(count);
  const unsigned char* data = p + header;
  if (a.type == 0x08) {
    for (std::uint64_t i = 0; i < count; ++i) a.values[i] = static_cast<float>(data[i]);
  } else {
    for (std::uint64_t i = 0; i < count; ++i) a.values[i] = convert(a.type, data + i * size);
  }
  return a;
}

Result<IdxArray> read_idx(const std::string& path, Env& env) {
  GOSSIP_ASSIGN_OR_RETURN(std::string bytes, env.read_file(path));
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
      static_cast<unsigned char>(bytes[1]) == 0x8b) {
    GOSSIP_ASSIGN_OR_RETURN(bytes, gunzip(bytes, path));
  }
  return parse_idx(bytes, path);
}

Result<Dataset> load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                                 int num_classes, Env& env) {
  GOSSIP_ASSIGN_OR_RETURN(IdxArray images, read_idx(images_path, env));
  GOSSIP_ASSIGN_OR_RETURN(IdxArray labels, read_idx(labels_path, env));
  if (images.type != 0x08 || images.dims.size() < 2) {
    return invalid_argument(images_path +
                            ": expected unsigned-byte images (type 08) with at least "
                            "2 dimensions (count, pixels...)");
  }
  if (labels.type != 0x08 || labels.dims.size() != 1) {
    return invalid_argument(labels_path + ": expected unsigned-byte labels (type 08), 1 dimension");
  }
  if (images.count() != labels.count()) {
    return invalid_argument(images_path + " holds " + std::to_string(images.count()) +
                            " images but " + labels_path + " holds " +
                            std::to_string(labels.count()) + " labels");
  }
  Dataset d;
  d.num_examples = images.count();
  d.dim = static_cast<int>(images.row_size());
  d.num_classes = num_classes;
  d.features = std::move(images.values);
  for (float& v : d.features) v *= 1.0f / 255.0f;
  d.labels.resize(d.num_examples);
  for (std::int64_t i = 0; i < d.num_examples; ++i) {
    d.labels[i] = static_cast<std::int32_t>(labels.values[i]);
  }
  GOSSIP_RETURN_IF_ERROR(d.validate(labels_path));
  return d;
}

Result<Dataset> load_fashion_mnist(const std::string& dir, Split split, Env& env) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  auto find = [&](const std::string& stem) -> Result<std::string> {
    for (const char* ext : {".gz", ""}) {
      std::string path = dir + "/" + stem + ext;
      if (env.file_exists(path)) return path;
    }
    return not_found("Fashion-MNIST: neither " + dir + "/" + stem + ".gz nor " + dir + "/" + stem +
                     " exists (install the Debian package dataset-fashion-mnist, "
                     "scripts/setup.sh, or point data_dir at a copy)");
  };
  GOSSIP_ASSIGN_OR_RETURN(std::string images, find(prefix + "-images-idx3-ubyte"));
  GOSSIP_ASSIGN_OR_RETURN(std::string labels, find(prefix + "-labels-idx1-ubyte"));
  return load_idx_dataset(images, labels, 10, env);
}

}  // namespace gossip::sgd
