#pragma once

// A throwaway self-signed certificate for mock-llm's TLS tests (in-process
// OpenSSL, no CLI needed).

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace mockllm::test {

/**
 * `name` made unique to this process: ctest runs every test in its own
 * process, in parallel, so shared temp file names would race.
 */
inline std::string uniqueName(const std::string& name) {
  return std::to_string(::getpid()) + "-" + name;
}

/** Writes a P-256 self-signed certificate for "localhost" and its key as PEM files. */
inline bool writeSelfSignedCert(const std::string& cert_path, const std::string& key_path) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  if (key == nullptr || x == nullptr) return false;
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  bool ok = X509_sign(x, key, EVP_sha256()) > 0;
  FILE* cf = std::fopen(cert_path.c_str(), "w");
  FILE* kf = std::fopen(key_path.c_str(), "w");
  ok = ok && cf && kf && PEM_write_X509(cf, x) == 1 &&
       PEM_write_PrivateKey(kf, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  if (cf) std::fclose(cf);
  if (kf) std::fclose(kf);
  X509_free(x);
  EVP_PKEY_free(key);
  return ok;
}

}  // namespace mockllm::test
