from pytest_triton.base.moved import old_path  # 0.1.0 path, kept with a warning (base/moved.py)

__getattr__ = old_path(__name__)
