// The `vq` family's codebook encoder for gpu/'s decode caches: the GPU library neither reads
// codebook files nor encodes (vq/ does), so make_decode_cache serves `vq:codebooks=...` only
// once a caller that links vq/ installs this (`kvlab gpu`, the Python module).
#pragma once

namespace kvlab {

// Sets gpu::set_vq_encoder to vq/'s encoder: the books of the file's first layer and
// vq_encode's codes (what the method's apply() decodes). Idempotent.
void install_vq_encoder();

}  // namespace kvlab
