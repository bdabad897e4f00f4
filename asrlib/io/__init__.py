"""File handling every stage shares: atomic writes (:mod:`.atomic`), Kaldi text tables (:mod:`.tables`), file hashes
and identities (:mod:`.files`), output-directory locks and completion markers (:mod:`.stage`)."""
