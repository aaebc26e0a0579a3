//! The agent protocol's codec: prost messages, with buffers sized for its messages.
//!
//! tonic's default gives each stream an 8 KiB encode and an 8 KiB decode buffer for its whole
//! life, and an agent keeps four streams open to the head (heartbeats, assignments, reports,
//! logs): up to 56 KiB per node on the head, and as much on the agent, nearly all of it empty,
//! since the messages are a few hundred bytes (a status report, a heartbeat, a start). The
//! buffers here start at 1 KiB and grow when a message needs it (a large batch of reports, a
//! 64 KiB log chunk). Measured by `berth bench api`'s phase 6 (1,000 simulated nodes, head and
//! agents in one process): with tonic's buffers, opening the report streams alone grew the
//! process by ~30 MB more than with these (~300 B per actor of its 100,000).

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// Initial size of a stream's encode and decode buffers.
pub const BUFFER_BYTES: usize = 1024;
/// Encoded bytes after which an encoder hands what it has to the transport (tonic's default).
const YIELD_BYTES: usize = 32 * 1024;

/// [`ProstCodec`] with [`BUFFER_BYTES`] buffers (the generated code names it in `build.rs`).
#[derive(Debug, Clone)]
pub struct AgentCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for AgentCodec<T, U> {
    fn default() -> Self {
        AgentCodec(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(BUFFER_BYTES, YIELD_BYTES)
}

impl<T, U> Codec for AgentCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}
