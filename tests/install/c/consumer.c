/* Consumer of the installed package through pkg-config (mha.pc) from plain C:
 *   cc consumer.c $(pkg-config --cflags --libs mha)
 * Checks the ISA query, one SGEMM with exact small-integer results, one
 * attention forward against an independent double computation, and the error
 * path (status + mha_last_error). Exit 0 on success. */
#include <math.h>
#include <mha/mha.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

static void check(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAIL: %s\n", what);
    ++failures;
  }
}

int main(void) {
  const char* isa = mha_isa_name();
  check(isa != NULL && (strcmp(isa, "scalar") == 0 || strcmp(isa, "avx2") == 0 ||
                        strcmp(isa, "avx512") == 0 || strcmp(isa, "neon") == 0),
        "mha_isa_name() names a known ISA");

  /* [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50]: exact in float. */
  const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  float c[4] = {0, 0, 0, 0};
  check(mha_sgemm('N', 'N', 2, 2, 2, 1.f, a, 2, b, 2, 0.f, c, 2) == MHA_OK, "mha_sgemm status");
  check(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50, "mha_sgemm result");

  /* Self-attention, E = 4, H = 2, identity projections, no biases: the output
   * of each head h is softmax(x_h x_h^T / sqrt(2)) x_h on its 2 features. */
  enum { E = 4, L = 3 };
  float eye[E * E] = {0};
  for (int i = 0; i < E; ++i) eye[i * E + i] = 1.f;
  const float x[L * E] = {0.9f, 0.1f, 0.f, 0.3f, 0.8f, 0.2f, 0.1f, -0.5f, -0.4f, 0.6f, 0.7f, 0.2f};
  mha_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.embed_dim = E;
  cfg.num_heads = 2;
  mha_weights w;
  memset(&w, 0, sizeof w);
  w.q_weight = w.k_weight = w.v_weight = w.out_weight = eye;
  mha_attention* attn = NULL;
  check(mha_attention_create(&cfg, &w, &attn) == MHA_OK && attn != NULL, "mha_attention_create");
  float out[L * E];
  check(mha_attention_forward(attn, 1, L, L, x, x, x, NULL, out, NULL, 0) == MHA_OK,
        "mha_attention_forward status");
  double max_err = 0;
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < L; ++i) {
      double s[L], mx = -1e300, sum = 0;
      for (int j = 0; j < L; ++j) {
        s[j] = 0;
        for (int d = 0; d < 2; ++d) s[j] += (double)x[i * E + 2 * h + d] * x[j * E + 2 * h + d];
        s[j] /= sqrt(2.0);
        if (s[j] > mx) mx = s[j];
      }
      for (int j = 0; j < L; ++j) sum += (s[j] = exp(s[j] - mx));
      for (int d = 0; d < 2; ++d) {
        double o = 0;
        for (int j = 0; j < L; ++j) o += s[j] / sum * x[j * E + 2 * h + d];
        double e = fabs(o - out[i * E + 2 * h + d]);
        if (e > max_err) max_err = e;
      }
    }
  }
  check(max_err < 1e-5, "attention output matches the double computation");
  mha_attention_destroy(attn);

  /* E % H != 0 is rejected with a message. */
  cfg.num_heads = 3;
  attn = NULL;
  check(mha_attention_create(&cfg, &w, &attn) == MHA_INVALID_ARGUMENT,
        "E % H != 0 gives MHA_INVALID_ARGUMENT");
  check(attn == NULL && strlen(mha_last_error()) > 0, "the error leaves a message");

  printf("c consumer: isa=%s, attention max error %.2e, %s\n", isa, max_err,
         failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
