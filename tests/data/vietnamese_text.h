// Test helper: a small Vietnamese corpus and a string with every vowel in every tone,
// so tokenizer tests need no files.
#pragma once

#include <string>
#include <vector>

namespace rt::data::testing {

// Every Vietnamese vowel (a ă â e ê i o ô ơ u ư y, lower and upper case) with each of the
// six tones (none, huyền, sắc, hỏi, ngã, nặng), plus đ/Đ. NFC.
inline std::string AllToneMarks() {
  return "a à á ả ã ạ ă ằ ắ ẳ ẵ ặ â ầ ấ ẩ ẫ ậ e è é ẻ ẽ ẹ ê ề ế ể ễ ệ i ì í ỉ ĩ ị "
         "o ò ó ỏ õ ọ ô ồ ố ổ ỗ ộ ơ ờ ớ ở ỡ ợ u ù ú ủ ũ ụ ư ừ ứ ử ữ ự y ỳ ý ỷ ỹ ỵ "
         "A À Á Ả Ã Ạ Ă Ằ Ắ Ẳ Ẵ Ặ Â Ầ Ấ Ẩ Ẫ Ậ E È É Ẻ Ẽ Ẹ Ê Ề Ế Ể Ễ Ệ I Ì Í Ỉ Ĩ Ị "
         "O Ò Ó Ỏ Õ Ọ Ô Ồ Ố Ổ Ỗ Ộ Ơ Ờ Ớ Ở Ỡ Ợ U Ù Ú Ủ Ũ Ụ Ư Ừ Ứ Ử Ữ Ự Y Ỳ Ý Ỷ Ỹ Ỵ đ Đ";
}

// ~`lines` lines of Vietnamese-like text, deterministic.
inline std::vector<std::string> VietnameseLines(int lines) {
  static const char* const kSentences[] = {
      "Hà Nội là thủ đô của nước Cộng hòa Xã hội chủ nghĩa Việt Nam.",
      "Thành phố Hồ Chí Minh là thành phố lớn nhất Việt Nam về dân số.",
      "Sông Hồng chảy qua nhiều tỉnh miền Bắc trước khi đổ ra biển Đông.",
      "Người dân đã đón Tết Nguyên Đán với nhiều hoạt động văn hóa truyền thống.",
      "Đội tuyển bóng đá quốc gia giành chiến thắng trong trận đấu tối qua.",
      "Giá vàng hôm nay tăng nhẹ, trong khi đồng đô la giảm 0,5%.",
      "Học sinh trường trung học phổ thông chuẩn bị cho kỳ thi tốt nghiệp năm 2017.",
      "Phở bò là món ăn nổi tiếng, được nhiều du khách nước ngoài yêu thích.",
      "Vịnh Hạ Long được UNESCO công nhận là di sản thiên nhiên thế giới.",
      "Chính phủ ban hành nghị định mới về quản lý đất đai và nhà ở.",
      "Ông ấy nói rằng: “Chúng tôi sẽ tiếp tục nỗ lực vì sự phát triển bền vững”.",
      "Khí hậu nhiệt đới gió mùa với hai mùa rõ rệt: mùa mưa và mùa khô.",
  };
  std::vector<std::string> out;
  for (int i = 0; i < lines; ++i) {
    std::string l = kSentences[i % 12];
    l += " ";
    l += kSentences[(i * 7 + 3) % 12];
    if (i % 5 == 0) l += " " + std::to_string(i * 37);
    out.push_back(l);
  }
  return out;
}

}  // namespace rt::data::testing
