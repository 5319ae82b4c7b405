use hybridkv_media::MediaError;

/// Operating errors of the storage engine, one variant per thing a caller can act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("key is {len_bytes} bytes, over the limit of {limit_bytes} bytes")]
    KeyTooLarge { len_bytes: usize, limit_bytes: usize },
    #[error("value is {len_bytes} bytes, over the limit of {limit_bytes} bytes for this namespace")]
    ValueTooLarge { len_bytes: usize, limit_bytes: usize },
    #[error("batch of {len_bytes} bytes does not fit in one write block of {limit_bytes} bytes")]
    BatchTooLarge { len_bytes: usize, limit_bytes: usize },
    #[error("cannot {operation} a key whose {parts} parts take {len_bytes} bytes: a {operation} rewrites them in one batch, at most one write block of {limit_bytes} bytes (write_block_bytes)")]
    PartsTooLarge { operation: &'static str, parts: u32, len_bytes: usize, limit_bytes: usize },
    #[error("namespace '{namespace}': data tier full ({capacity_bytes} bytes); delete keys or enlarge data_bytes")]
    DataFull { namespace: String, capacity_bytes: u64 },
    #[error("namespace '{namespace}': index region full ({capacity_bytes} bytes); enlarge index_bytes")]
    IndexFull { namespace: String, capacity_bytes: u64 },
    #[error("namespace '{namespace}': index partition {partition} does not match its checksum; its keys are refused until a restart rebuilds the index")]
    IndexDamaged { namespace: String, partition: usize },
    #[error("namespace '{namespace}': too many writes waiting for durability ({limit} records)")]
    WriteBacklogFull { namespace: String, limit: usize },
    #[error("namespace '{namespace}' refuses writes until restart after a failed flush: {reason}")]
    Poisoned { namespace: String, reason: String },
    #[error("a key's value may have at most {limit} parts")]
    TooManyParts { limit: u32 },
    #[error("transaction touched key not declared when it began")]
    UndeclaredKey,
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: String, detail: String },
    /// The transaction's body gave up for a reason of its own: nothing it wrote is kept.
    #[error("transaction aborted: {reason}")]
    Aborted { reason: String },
    #[error(transparent)]
    Media(#[from] MediaError),
}

impl EngineError {
    /// Whether the caller should answer "out of memory/space" (Redis's -OOM) rather than -ERR.
    pub fn is_out_of_space(&self) -> bool {
        matches!(
            self,
            EngineError::DataFull { .. } | EngineError::IndexFull { .. } | EngineError::WriteBacklogFull { .. }
        ) || matches!(self, EngineError::Media(error) if error.is_no_space())
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
