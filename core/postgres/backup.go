package postgres

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// eachProgram is EachProgram inside the reader's snapshot: a page of
// programs (with their sources) per statement, then each one's results.
func (r *reader) eachProgram(fn func(storage.Program, []storage.ScheduleResult) error) error {
	var name, hash string
	for {
		page, err := r.ProgramsAfter(name, hash, tuning.ServerExportPage)
		if err != nil {
			return err
		}
		for _, p := range page {
			results := []storage.ScheduleResult{}
			err := r.rows(func(rows pgx.Rows) error {
				var sr storage.ScheduleResult
				err := rows.Scan(&sr.Schedule, &sr.ResultJSON, &sr.Runs)
				results = append(results, sr)
				return err
			}, "SELECT r.schedule, r.result_json, "+runsOfR+" FROM records r WHERE r.program_hash = $1 ORDER BY r.creation_date, r.rowid", p.Hash)
			if err != nil {
				return err
			}
			if err := fn(p, results); err != nil {
				return err
			}
		}
		if len(page) < tuning.ServerExportPage {
			return nil
		}
		name, hash = page[len(page)-1].Name, page[len(page)-1].Hash
	}
}

// backupTo writes the reader's snapshot into path, an empty file the
// caller created (see storage.Backend.Backup), as a SQLite
// database of the same tables (the original's schema, with the
// kernel-config tables when there are entries, the runs tables when there
// are runs): a copy that any TiraStore,
// or the original library, can open. Records go in insertion order, so
// that the copy's rowid order, and hence its export, is the server's.
// Claims are not copied: they belong to running workers.
func (r *reader) backupTo(path string) error {
	db, err := sqlite.Open(path, nil)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer db.Close()
	meta := map[string]string{}
	for _, k := range []string{"cpu_model", "slurm_cpus", "created_at"} {
		v, _, err := r.Meta(k)
		if err != nil {
			return err
		}
		meta[k] = v
	}
	if err := db.Init(meta["cpu_model"], meta["slurm_cpus"], meta["created_at"]); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return db.Tx(func(tx *sqlite.Tx) error {
		err := r.rows(func(rows pgx.Rows) error {
			var p storage.Program
			if err := rows.Scan(&p.Hash, &p.Name, &p.Source); err != nil {
				return err
			}
			return tx.PutProgram(p)
		}, "SELECT program_hash, program_name, source_code FROM programs ORDER BY program_name, program_hash")
		if err != nil {
			return err
		}
		err = r.eachRecordPage("SELECT rowid, "+recordColumnsOfR+", "+runsOfR+" FROM records r", func(rows pgx.Rows) (int64, error) {
			var id int64
			var rec storage.Record
			if err := rows.Scan(append(append([]any{&id}, sqlite.RecordFields(&rec)...), &rec.Runs)...); err != nil {
				return 0, err
			}
			if _, err := tx.PutRecord(&rec, false); err != nil {
				return 0, err
			}
			if rec.Runs != "" {
				return id, tx.PutRuns(rec.Key, rec.UpdateDate, rec.Runs)
			}
			return id, nil
		})
		if err != nil {
			return err
		}
		err = r.rows(func(rows pgx.Rows) error {
			var fp, text string
			if err := rows.Scan(&fp, &text); err != nil {
				return err
			}
			return tx.PutContext(fp, text)
		}, "SELECT fingerprint, context_json FROM run_contexts ORDER BY fingerprint")
		if err != nil {
			return err
		}
		err = r.rows(func(rows pgx.Rows) error {
			var e storage.ConfigEntry
			if err := rows.Scan(configDst(&e)...); err != nil {
				return err
			}
			_, err := tx.PutConfig(&e, false)
			return err
		}, "SELECT "+configColumns+" FROM config_entries ORDER BY namespace, key")
		if err != nil {
			return err
		}
		return r.rows(func(rows pgx.Rows) error {
			var im storage.ConfigImport
			if err := rows.Scan(&im.Path, &im.Size, &im.MtimeNS, &im.SHA256, &im.Entries, &im.ImportedAt, &im.Hostname, &im.Username); err != nil {
				return err
			}
			return tx.PutConfigImport(&im)
		}, "SELECT path, size, mtime_ns, sha256, entries, imported_at, hostname, username FROM config_imports ORDER BY path")
	})
}
