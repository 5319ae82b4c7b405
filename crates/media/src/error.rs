use std::io;

/// Operating errors of the media layer. Programmer errors (out-of-range offsets, misaligned
/// direct I/O) are assertions, not variants.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MediaError {
    #[error("I/O error on {what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("no space left on device for {what}")]
    NoSpace { what: String },
    #[error("power lost (simulated): the medium accepts no more operations until reboot")]
    PowerLost,
}

impl MediaError {
    /// Wraps an OS error, mapping ENOSPC to [`MediaError::NoSpace`] so callers can tell a full
    /// device (retry later) from a failed one.
    pub fn from_io(what: impl Into<String>, source: io::Error) -> MediaError {
        let what = what.into();
        if source.raw_os_error() == Some(libc::ENOSPC) {
            MediaError::NoSpace { what }
        } else {
            MediaError::Io { what, source }
        }
    }

    pub fn is_no_space(&self) -> bool {
        matches!(self, MediaError::NoSpace { .. })
    }
}
