// Input reading: over-long lines come out in segments that reassemble exactly, long
// documents in chunks cut between lines, CRLF handled, UTF-8 validation is strict.
#include <doctest/doctest.h>
#include <zstd.h>

#include <string>

#include "data/document_reader.h"
#include "data/temp_dir.h"
#include "data/text_input.h"
#include "data/utf8.h"

namespace rt::data {
namespace {

using testing::TempDir;
using testing::WriteFile;

TEST_CASE("UTF-8 validation") {
  CHECK(IsValidUtf8("Tiếng Việt có dấu: ă â đ ê ô ơ ư 😀"));
  CHECK(IsValidUtf8(""));
  size_t bad = 0;
  CHECK_FALSE(IsValidUtf8("abc\xff", &bad));
  CHECK(bad == 3);
  CHECK_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  CHECK_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  CHECK_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  CHECK_FALSE(IsValidUtf8("ab\xe1\xba"));        // truncated sequence
  CHECK(Utf8PrefixAtBoundary("aế", 2) == 1);     // "ế" is 3 bytes starting at 1
}

TEST_CASE("over-long lines are segmented and reassemble exactly") {
  TempDir tmp;
  std::string line;
  for (int i = 0; i < 300; ++i) line += "Việt Nam " + std::to_string(i) + " ";
  line += "đuôi";
  WriteFile(tmp / "l.txt", "ngắn\r\n" + line + "\nkết thúc");
  auto stream = InputStream::Open(InputFile{tmp / "l.txt", 0, false});
  REQUIRE(stream.ok());
  LineReader reader(std::move(*stream), 100);
  LineReader::Line l;
  REQUIRE(*reader.Next(&l));
  CHECK(l.text == "ngắn");  // "\r" removed
  std::string joined;
  int segments = 0;
  while (true) {
    REQUIRE(*reader.Next(&l));
    CHECK(l.text.size() <= 100);
    CHECK(IsValidUtf8(l.text));
    CHECK(l.line_no == 2);
    joined += std::string(l.text);
    ++segments;
    if (l.complete) break;
  }
  CHECK(segments > 10);
  CHECK(joined == line);
  REQUIRE(*reader.Next(&l));
  CHECK(l.text == "kết thúc");
  CHECK(l.line_no == 3);
  CHECK_FALSE(*reader.Next(&l));
}

TEST_CASE("long documents come out in chunks cut between lines") {
  TempDir tmp;
  std::string doc;
  for (int i = 0; i < 100; ++i) doc += "dòng " + std::to_string(i) + "\n";
  WriteFile(tmp / "d.txt", "\n\n" + doc + "\n\n\nhai\n");
  DocumentReader reader({InputFile{tmp / "d.txt", 0, false}}, 64);
  TextChunk c;
  std::string joined;
  int chunks = 0;
  while (true) {
    REQUIRE(*reader.Next(&c));
    joined += c.text;
    ++chunks;
    CHECK(c.text.back() == '\n');
    if (c.ends_document) break;
  }
  CHECK(chunks > 5);
  CHECK(joined == doc);
  REQUIRE(*reader.Next(&c));
  CHECK(c.text == "hai\n");
  CHECK(c.ends_document);
  CHECK_FALSE(*reader.Next(&c));
  CHECK(reader.stats().documents == 2);
}

TEST_CASE("corrupt zstd input is an error naming the file") {
  TempDir tmp;
  WriteFile(tmp / "bad.zst", "this is not zstd data at all");
  DocumentReader reader({InputFile{tmp / "bad.zst", 28, true}});
  TextChunk c;
  auto r = reader.Next(&c);
  REQUIRE_FALSE(r.ok());
  CHECK(std::string(r.status().message()).find("bad.zst") != std::string::npos);
}

}  // namespace
}  // namespace rt::data
