// Manifest codec: escaping of arbitrary bytes, round trips, and strict rejection of
// every kind of malformed manifest.
#include "ckpt/manifest.h"

#include <doctest/doctest.h>

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/crc32c.h"

namespace rt::ckpt {
namespace {

CheckpointMeta SampleMeta() {
  CheckpointMeta m;
  m.step = 1234;
  m.epoch = 7;
  m.fields["config"] = "layers=6 heads=6 dim=384";
  m.fields["rng"] = std::string("\x00\x01\xff\n%\r ", 7);
  m.fields["empty"] = "";
  m.fields["key with space\n"] = "v";
  return m;
}

std::vector<SectionInfo> SampleSections() {
  return {{"params", 4096, 0x12345678u}, {"adam.m", 0, 0u}, {"adam_v-2", 99, 0xffffffffu}};
}

}  // namespace

TEST_CASE("escaping round-trips every byte and yields only printable non-space bytes") {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  const std::string escaped = EscapeManifestToken(all);
  for (char ch : escaped) {
    const auto c = static_cast<unsigned char>(ch);
    CHECK(c >= 0x21);
    CHECK(c <= 0x7E);
  }
  auto back = UnescapeManifestToken(escaped);
  REQUIRE(back.ok());
  CHECK(*back == all);
  CHECK(EscapeManifestToken("a b%c\n") == "a%20b%25c%0A");
  CHECK(EscapeManifestToken("").empty());
  CHECK(UnescapeManifestToken("%4a%4A").value() == "JJ");
}

TEST_CASE("unescaping rejects malformed tokens") {
  CHECK(!UnescapeManifestToken("abc%").ok());
  CHECK(!UnescapeManifestToken("abc%4").ok());
  CHECK(!UnescapeManifestToken("%zz").ok());
  CHECK(!UnescapeManifestToken("a b").ok());
  CHECK(!UnescapeManifestToken(std::string("a\x80", 2)).ok());
}

TEST_CASE("step directory names") {
  CHECK(StepDirName(0) == "step-00000000");
  CHECK(StepDirName(1234) == "step-00001234");
  CHECK(StepDirName(123456789) == "step-123456789");
  int64_t step = -1;
  CHECK(ParseStepDirName("step-00001234", &step));
  CHECK(step == 1234);
  CHECK(ParseStepDirName("step-123456789", &step));
  CHECK(step == 123456789);
  CHECK(!ParseStepDirName("step-1234", &step));  // fewer than 8 digits
  CHECK(!ParseStepDirName("step-0000123x", &step));
  CHECK(!ParseStepDirName(".tmp-step-00001234-5", &step));
  CHECK(!ParseStepDirName("step-99999999999999999999", &step));
}

TEST_CASE("section names") {
  CHECK(IsValidSectionName("params"));
  CHECK(IsValidSectionName("adam.m_shard-3"));
  CHECK(!IsValidSectionName(""));
  CHECK(!IsValidSectionName(".hidden"));
  CHECK(!IsValidSectionName("manifest"));
  CHECK(!IsValidSectionName("a/b"));
  CHECK(!IsValidSectionName("a b"));
  CHECK(!IsValidSectionName(std::string(129, 'a')));
  CHECK(IsValidSectionName(std::string(128, 'a')));
}

TEST_CASE("manifest encode/decode round trip") {
  const CheckpointMeta meta = SampleMeta();
  const std::vector<SectionInfo> sections = SampleSections();
  const std::string text = EncodeManifest(meta, sections);
  CHECK(text.rfind("ringtrain-checkpoint 1\nstep 1234\nepoch 7\n", 0) == 0);
  CHECK(text.find("section params 4096 12345678\n") != std::string::npos);
  CheckpointMeta m2;
  std::vector<SectionInfo> s2;
  REQUIRE(DecodeManifest(text, "manifest.txt", &m2, &s2).ok());
  CHECK(m2.step == meta.step);
  CHECK(m2.epoch == meta.epoch);
  CHECK(m2.fields == meta.fields);
  REQUIRE(s2.size() == sections.size());
  for (size_t i = 0; i < s2.size(); ++i) {
    CHECK(s2[i].name == sections[i].name);
    CHECK(s2[i].bytes == sections[i].bytes);
    CHECK(s2[i].crc32c == sections[i].crc32c);
  }
}

TEST_CASE("manifest with nothing but the header is valid") {
  CheckpointMeta meta;
  const std::string text = EncodeManifest(meta, {});
  CheckpointMeta m2;
  m2.step = 5;
  std::vector<SectionInfo> s2;
  REQUIRE(DecodeManifest(text, "m", &m2, &s2).ok());
  CHECK(m2.step == 0);
  CHECK(s2.empty());
}

// Appends a correct crc line to `body`, so that a test exercises the syntax checks
// rather than the checksum.
std::string WithCrc(const std::string& body) {
  return body + absl::StrFormat("manifest-crc32c %08x\n", rt::Crc32c(body.data(), body.size()));
}

TEST_CASE("manifest decode checks syntax, order and uniqueness") {
  CheckpointMeta m;
  std::vector<SectionInfo> s;
  const std::string head = "ringtrain-checkpoint 1\nstep 3\nepoch 1\n";
  auto message = [&](const std::string& body) {
    absl::Status st = DecodeManifest(WithCrc(body), "M", &m, &s);
    return std::string(st.message());
  };
  CHECK(message(head).empty());
  CHECK(message(head + "section a 1 00000000\nsection a 1 00000000\n").find("duplicate section") !=
        std::string::npos);
  CHECK(message(head + "field b 1\nfield a 2\n").find("not unique and sorted") !=
        std::string::npos);
  CHECK(message(head + "field a 1\nfield a 2\n").find("not unique and sorted") !=
        std::string::npos);
  CHECK(message(head + "section a 1 00000000\nfield a 2\n").find("M:5: unexpected line") == 0);
  CHECK(message(head + "section a -1 00000000\n").find("expected 'section") != std::string::npos);
  CHECK(message(head + "section a 1 0000000G\n").find("expected 'section") != std::string::npos);
  CHECK(message(head + "section a 1 ABCDEF01\n").find("expected 'section") != std::string::npos);
  CHECK(message(head + "section ../x 1 00000000\n").find("invalid section name") !=
        std::string::npos);
  CHECK(message(head + "field %zz 1\n").find("field key") != std::string::npos);
  CHECK(message(head + "field  1\n").find("empty field key") != std::string::npos);
  CHECK(message(head + "field a\n").find("expected 'field") != std::string::npos);
  CHECK(message("ringtrain-checkpoint 1\nstep +3\nepoch 1\n").find("M:2:") == 0);
  CHECK(message("ringtrain-checkpoint 1\nstep 3\nepoch 18446744073709551616\n").find("M:3:") == 0);
  CHECK(message("ringtrain-checkpoint 1\nepoch 1\nstep 3\n").find("M:2:") == 0);
  // An empty field value is legal (the line ends in a space).
  CHECK(message(head + "field a \n").empty());
  CHECK(m.fields.at("a").empty());
}

TEST_CASE("manifest decode rejects every corruption with a located message") {
  const std::string good = EncodeManifest(SampleMeta(), SampleSections());
  CheckpointMeta m;
  std::vector<SectionInfo> s;
  auto decode = [&](const std::string& text) { return DecodeManifest(text, "M", &m, &s); };

  SUBCASE("any single flipped byte") {
    for (size_t i = 0; i < good.size(); ++i) {
      std::string bad = good;
      bad[i] ^= 0x01;
      absl::Status st = decode(bad);
      CHECK_MESSAGE(!st.ok(), "flip at ", i, " accepted");
      CHECK(absl::IsDataLoss(st));
    }
  }
  SUBCASE("every truncation") {
    for (size_t n = 0; n < good.size(); ++n) {
      CHECK_MESSAGE(!decode(good.substr(0, n)).ok(), "truncation to ", n, " accepted");
    }
  }
  SUBCASE("checksum mismatch is named") {
    std::string bad = absl::StrReplaceAll(good, {{"epoch 7", "epoch 8"}});
    absl::Status st = decode(bad);
    CHECK(std::string(st.message()).find("checksum mismatch") != std::string::npos);
  }
  SUBCASE("garbage and wrong version") {
    CHECK(!decode("hello world\n").ok());
    CHECK(!decode(std::string(100, '\0')).ok());
    std::string v2 = EncodeManifest(SampleMeta(), {});
    v2.replace(0, std::string("ringtrain-checkpoint 1").size(), "ringtrain-checkpoint 2");
    absl::Status st = decode(v2);
    CHECK(std::string(st.message()).find("unsupported format version 2") != std::string::npos);
    CHECK(std::string(st.message()).find("M:1:") == 0);
  }
  SUBCASE("text after the crc line") { CHECK(!decode(good + "x\n").ok()); }
}

}  // namespace rt::ckpt
