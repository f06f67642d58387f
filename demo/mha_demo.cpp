// mha_demo: multi-head attention over "the cat sat on the mat because it was
// tired", through the public C++ API, printing each head's attention weights
// as a terminal heatmap (query tokens down, key tokens across).
//
// The embeddings and projections are toys built by hand so that each head
// has a readable job; the attention itself is the library's:
//   head 0 "pronoun -> antecedent": "it" looks for animals (and, less, places)
//   head 1 "previous token":        rotated sinusoidal positions
//   head 2 "predicate -> subject":  verbs and adjectives look for subjects
// A causal mask is on, as in a decoder, so each token sees itself and the
// tokens before it.
#include <mha/mha.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mha/attention.hpp>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kE = 12, kHeads = 3, kHeadDim = kE / kHeads;

// Embedding features (columns of the projections).
enum Feature : std::size_t {
  kAnimal,
  kPlace,
  kPronoun,
  kVerb,
  kFunction,
  kAdjective,
  kPos0,  // kPos0..kPos0+3: sin/cos of position at two frequencies
  kSubject = kPos0 + 4,
  kConstant,
};
constexpr double kFreq[2] = {0.7, 1.9};

struct Token {
  const char* text;
  std::vector<Feature> features;
};

const std::vector<Token> kSentence = {
    {"the", {kFunction}},     {"cat", {kAnimal, kSubject}}, {"sat", {kVerb}},
    {"on", {kFunction}},      {"the", {kFunction}},         {"mat", {kPlace}},
    {"because", {kFunction}}, {"it", {kPronoun, kSubject}}, {"was", {kVerb}},
    {"tired", {kAdjective}},
};

std::vector<float> embed(const std::vector<Token>& tokens) {
  std::vector<float> x(tokens.size() * kE, 0.f);
  for (std::size_t p = 0; p < tokens.size(); ++p) {
    float* row = &x[p * kE];
    for (Feature f : tokens[p].features) row[f] = 1.f;
    row[kConstant] = 1.f;
    for (int f = 0; f < 2; ++f) {
      row[kPos0 + 2 * f] = static_cast<float>(std::sin(kFreq[f] * static_cast<double>(p)));
      row[kPos0 + 2 * f + 1] = static_cast<float>(std::cos(kFreq[f] * static_cast<double>(p)));
    }
  }
  return x;
}

struct ToyWeights {
  std::vector<float> q = std::vector<float>(kE * kE, 0.f), k = q, v = q, o = q;
  ToyWeights() {
    auto at = [](std::vector<float>& w, std::size_t head, std::size_t slot,
                 std::size_t in) -> float& { return w[(head * kHeadDim + slot) * kE + in]; };
    // Head 0: q = 4*pronoun, k = 2*animal + 0.8*place.
    at(q, 0, 0, kPronoun) = 4.f;
    at(k, 0, 0, kAnimal) = 2.f;
    at(k, 0, 0, kPlace) = 0.8f;
    // Head 1: q is the position rotated back by one step, k the position, so
    // q_i . k_j = g (cos(w1 (i-1-j)) + cos(w2 (i-1-j))), largest at j = i-1.
    const float g = 6.f;
    for (std::size_t f = 0; f < 2; ++f) {
      const auto c = static_cast<float>(std::cos(kFreq[f])),
                 s = static_cast<float>(std::sin(kFreq[f]));
      const std::size_t sn = kPos0 + 2 * f, cs = sn + 1;
      at(q, 1, 2 * f, sn) = g * c;  // sin(w(p-1)) = sin(wp) cos w - cos(wp) sin w
      at(q, 1, 2 * f, cs) = -g * s;
      at(q, 1, 2 * f + 1, cs) = g * c;  // cos(w(p-1)) = cos(wp) cos w + sin(wp) sin w
      at(q, 1, 2 * f + 1, sn) = g * s;
      at(k, 1, 2 * f, sn) = 1.f;
      at(k, 1, 2 * f + 1, cs) = 1.f;
    }
    // Head 2: q = 3*verb + 2*adjective, k = 2*subject.
    at(q, 2, 0, kVerb) = 3.f;
    at(q, 2, 0, kAdjective) = 2.f;
    at(k, 2, 0, kSubject) = 2.f;
    // Values and output: identity, so out is the heads' outputs side by side.
    for (std::size_t i = 0; i < kE; ++i) v[i * kE + i] = o[i * kE + i] = 1.f;
  }
  mha_weights view() const {
    return {q.data(), k.data(), v.data(), o.data(), nullptr, nullptr, nullptr, nullptr};
  }
};

bool use_color() {
  return isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
}

// One cell, 8 columns wide: the weight in percent on a grey background whose
// brightness is the weight (color), or a glyph ramp (plain text, e.g. CI logs).
void print_cell(float w, bool color) {
  if (color) {
    const int level = 232 + static_cast<int>(std::lround(w * 23.f));  // 232 black .. 255 white
    if (w == 0.f)  // masked or exactly zero: blank, so the mask's shape shows
      std::printf("\x1b[48;5;232m        \x1b[0m");
    else
      std::printf("\x1b[48;5;%dm\x1b[38;5;%dm %5.1f%% \x1b[0m", level, w > 0.5f ? 232 : 252,
                  100.f * w);
    return;
  }
  static const char kRamp[] = " .:-=+*#%@";
  const char glyph = kRamp[std::lround(w * 9.f)];
  std::printf(" %c%c%c%c%c%c ", glyph, glyph, glyph, glyph, glyph, glyph);
}

}  // namespace

int main() {
  try {
    const std::size_t n = kSentence.size();
    const ToyWeights weights;
    const mha::MultiheadAttention attn(mha_config{kE, kHeads, 0, 0, 0}, weights.view());
    const std::vector<float> x = embed(kSentence);
    std::vector<float> out(n * kE), w(kHeads * n * n);
    const mha_mask causal{1, nullptr, nullptr, 0};
    attn.forward_self(1, n, x.data(), &causal, out.data(), w.data());

    std::printf("mha demo: multi-head self-attention, ISA %s (MHA_ISA overrides), %zu thread(s)\n",
                mha_isa_name(), mha_get_num_threads());
    std::printf("sentence: ");
    for (const Token& t : kSentence) std::printf("%s ", t.text);
    std::printf("\nembed_dim %zu, %zu heads of %zu, causal mask; rows: query, columns: key\n", kE,
                kHeads, kHeadDim);

    const bool color = use_color();
    static const char* kHeadNames[kHeads] = {"pronoun -> antecedent", "previous token",
                                             "predicate -> subject"};
    for (std::size_t h = 0; h < kHeads; ++h) {
      std::printf("\nhead %zu (%s)\n%8s", h, kHeadNames[h], "");
      for (const Token& t : kSentence) std::printf("%8s", t.text);
      std::printf("   strongest\n");
      for (std::size_t i = 0; i < n; ++i) {
        std::printf("%8s", kSentence[i].text);
        std::size_t best = 0;
        for (std::size_t j = 0; j < n; ++j) {
          const float wij = w[(h * n + i) * n + j];
          print_cell(wij, color);
          if (wij > w[(h * n + i) * n + best]) best = j;
        }
        // Name the strongest key, or say the weight is spread (ties within 1%).
        const float top = w[(h * n + i) * n + best];
        std::vector<const char*> tied;
        for (std::size_t j = 0; j < n; ++j)
          if (w[(h * n + i) * n + j] >= 0.99f * top) tied.push_back(kSentence[j].text);
        if (tied.size() == 1)
          std::printf("   -> %s %.2f\n", tied[0], top);
        else if (tied.size() == 2)
          std::printf("   -> %s, %s %.2f each\n", tied[0], tied[1], top);
        else
          std::printf("   -> even over %zu tokens\n", tied.size());
      }
    }
    if (!color) std::printf("\nshades: ' ' 0 .. '@' 1\n");
    return 0;
  } catch (const mha::Error& e) {
    std::fprintf(stderr, "mha_demo: %s\n", e.what());
    return 1;
  }
}
