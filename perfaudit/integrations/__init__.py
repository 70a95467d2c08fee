"""perfaudit inside the frameworks users train with: callbacks for Lightning (`lightning.py`) and Hugging
Face's Trainer (`transformers.py`), and the IPython magics for notebooks (`magics.py`). Each is a thin
adapter over the library API's WindowAudit (usecases/inprocess.py): the framework's hooks say where a
training step ends and when validation runs; the audit records, analyses and reports as `perfaudit run`
does. The frameworks are optional extras, imported only by the module that adapts to them."""
