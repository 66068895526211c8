//! SipHash-2-4 over whole 64-bit words: the tag that seals the frontend
//! option (`crate::ipopt`). Written as straight-line word arithmetic, the
//! same in the kernel programs (a handful of ALU instructions per round,
//! no loop over bytes for the verifier to walk) and on the host. Over the
//! little-endian bytes of its words it equals the reference SipHash-2-4.

/// A 128-bit SipHash key, as its two little-endian halves.
pub type Key = [u64; 2];

#[inline(always)]
const fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

#[inline(always)]
const fn absorb(v: &mut [u64; 4], m: u64) {
    v[3] ^= m;
    round(v);
    round(v);
    v[0] ^= m;
}

/// SipHash-2-4 of the 24 bytes that are `words` in little-endian order.
#[inline(always)]
pub const fn siphash24(key: Key, words: [u64; 3]) -> u64 {
    siphash24_words(key, words)
}

/// SipHash-2-4 of the `8 * N` bytes that are `words` in little-endian
/// order (fewer than 32 words: the length byte holds the byte count).
#[inline(always)]
pub const fn siphash24_words<const N: usize>(key: Key, words: [u64; N]) -> u64 {
    let mut v = [
        key[0] ^ 0x736f_6d65_7073_6575,
        key[1] ^ 0x646f_7261_6e64_6f6d,
        key[0] ^ 0x6c79_6765_6e65_7261,
        key[1] ^ 0x7465_6462_7974_6573,
    ];
    let mut i = 0;
    while i < N {
        absorb(&mut v, words[i]);
        i += 1;
    }
    // The last block: no bytes left over, the message length on top.
    absorb(&mut v, ((8 * N as u64) & 0xff) << 56);
    v[2] ^= 0xff;
    round(&mut v);
    round(&mut v);
    round(&mut v);
    round(&mut v);
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    extern crate std;

    use core::hash::Hasher as _;

    use rand::Rng as _;

    use super::*;

    fn reference<const N: usize>(key: Key, words: [u64; N]) -> u64 {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&key[0].to_le_bytes());
        bytes[8..].copy_from_slice(&key[1].to_le_bytes());
        let mut h = siphasher::sip::SipHasher24::new_with_key(&bytes);
        for w in words {
            h.write(&w.to_le_bytes());
        }
        h.finish()
    }

    #[test]
    fn equals_the_reference_siphash_2_4_of_the_words_bytes() {
        // The paper's key and message: bytes 0, 1, 2, ...
        let key = [0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908];
        let words = [
            0x0706_0504_0302_0100,
            0x0f0e_0d0c_0b0a_0908,
            0x1716_1514_1312_1110,
        ];
        assert_eq!(siphash24(key, words), reference(key, words));
        let mut rng = rand::rng();
        for _ in 0..1000 {
            let key = [rng.random(), rng.random()];
            let words = [rng.random(), rng.random(), rng.random()];
            assert_eq!(siphash24(key, words), reference(key, words));
        }
    }

    #[test]
    fn eight_words_equal_the_reference_too() {
        let mut rng = rand::rng();
        for _ in 0..1000 {
            let key = [rng.random(), rng.random()];
            let words: [u64; 8] = core::array::from_fn(|_| rng.random());
            assert_eq!(siphash24_words(key, words), reference(key, words));
        }
    }
}
