-- tollgate ledger, version 9: speech usage. `audio_ms` is the decoded audio of a transcription
-- (billed in whole seconds, rounded up); `input_characters` the text of a speech request.
-- Both 0 for chat requests, as on every earlier row.
ALTER TABLE usage ADD COLUMN audio_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage ADD COLUMN input_characters INTEGER NOT NULL DEFAULT 0;
